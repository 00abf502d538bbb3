"""The shop's pages and forms: catalogue browsing (search, categories, filters, sorting, pages), product pages with variants and reviews, the cart, checkout, orders and the account's address book.

Every form posts and redirects (post/redirect/get); validation errors and confirmations travel
in the redirect's query (``?error=size``), so any page is rebuilt exactly by reloading its URL —
forks rely on that. Listing pages redirect to a canonical query (empty fields dropped, prices
written ``20`` not ``20.00``, the search words in lower case), so the URL of a filtered listing does
not depend on how it was typed.
"""

from __future__ import annotations

from typing import NoReturn
from urllib.parse import urlencode

from aiohttp import web

from agentgym.envs.web.apps.shop.data import (
    PAYMENT,
    SHIPPING,
    address_text,
    long_date,
    money,
    options_text,
    populate,
    stars,
)
from agentgym.envs.web.site import WebApp, esc, form_value

PAGE_SIZE = 10
MAX_QUANTITY = 10

SORTS = {
    "featured": ("Featured", "p.id"),
    "price_asc": ("Price: low to high", "p.price, p.id"),
    "price_desc": ("Price: high to low", "p.price DESC, p.id"),
    "rating": ("Customer rating", "COALESCE(r.total * 1.0 / r.n, 0) DESC, COALESCE(r.n, 0) DESC, p.id"),
    "reviews": ("Most reviewed", "COALESCE(r.n, 0) DESC, p.id"),
}
RATINGS = {"": "Any rating", "4": "4 stars & up", "3": "3 stars & up", "2": "2 stars & up"}
LISTING_KEYS = ("q", "brand", "min_price", "max_price", "rating", "sort", "page")

ERRORS = {
    "size": "Please choose a size.",
    "colour": "Please choose a colour.",
    "quantity": f"Quantity must be a whole number from 1 to {MAX_QUANTITY}.",
    "rating": "Please choose a star rating.",
    "title": "Please give your review a title.",
    "body": "Please write a few words in your review.",
    "reviewed": "You have already reviewed this product.",
    "login": "Wrong username or password.",
    "empty": "Your cart is empty.",
    "address": "Please choose a shipping address.",
    "shipping": "Please choose a shipping method.",
    "payment": "Please choose a payment option.",
    "not_cancellable": "This order can no longer be cancelled.",
    "label": "Please give the address a label.",
    "label_taken": "You already have an address with that label.",
    "name": "Please enter the recipient's full name.",
    "street": "Please enter the street address.",
    "city": "Please enter the city.",
    "zip": "ZIP code must be 5 digits.",
    "delete_default": "You can't delete your default address; make another address the default first.",
}

STYLE = """
header form { display: inline; margin: 0; }
.crumbs { color: #666; margin-bottom: 6px; }
.layout { display: flex; gap: 24px; align-items: flex-start; }
.filters { width: 220px; display: flex; flex-direction: column; gap: 6px; }
.grid { display: grid; grid-template-columns: repeat(2, 300px); gap: 8px; }
.card { border: 1px solid #ccc; padding: 6px 8px; }
.price { font-weight: bold; }
.pager a, .pager strong { margin-right: 6px; }
.review { border-top: 1px solid #ddd; padding: 4px 0; }
.review h3 { margin: 2px 0; font-size: 1em; }
fieldset { margin-bottom: 8px; } label { display: block; margin: 2px 0; }
.address { border: 1px solid #ccc; padding: 6px; margin-bottom: 6px; width: 420px; }
"""


class ShopApp(WebApp):
    """An online store (see the module docstring)."""

    name = "shop"

    def build_database(self, db) -> None:
        populate(db)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.home),
            web.get("/search", self.search),
            web.get("/category/{slug}", self.category),
            web.get("/product/{id:\\d+}", self.product),
            web.post("/product/{id:\\d+}/cart", self.add_to_cart),
            web.post("/product/{id:\\d+}/reviews", self.add_review),
            web.get("/cart", self.cart),
            web.post("/cart/{id:\\d+}/update", self.update_cart),
            web.post("/cart/{id:\\d+}/remove", self.remove_from_cart),
            web.get("/checkout", self.checkout),
            web.post("/checkout", self.place_order),
            web.get("/orders", self.orders),
            web.get("/orders/{id:\\d+}", self.order),
            web.post("/orders/{id:\\d+}/cancel", self.cancel_order),
            web.get("/account", self.account),
            web.post("/account/addresses", self.add_address),
            web.post("/account/addresses/{id:\\d+}/default", self.set_default_address),
            web.post("/account/addresses/{id:\\d+}/delete", self.delete_address),
            web.get("/login", self.login_form),
            web.post("/login", self.login),
            web.post("/logout", self.logout),
        ]

    # ------------------------------------------------------------------ layout
    def shop_page(self, request: web.Request, title: str, body: str, *, query: str = "") -> web.Response:
        user = self.user(request)
        search = (
            f'<form action="/search" role="search"><input type="search" name="q" value="{esc(query)}" '
            'aria-label="Search products" placeholder="Search products"> <button>Search</button></form>'
        )
        if user:
            count = self.db.query("SELECT COALESCE(SUM(quantity), 0) FROM cart_items WHERE username = ?", (user,))[0][0]
            links = (
                f'<a href="/cart">Cart ({count})</a><a href="/orders">My orders</a><a href="/account">My account</a>'
                '<form method="post" action="/logout"><button>Sign out</button></form>'
            )
        else:
            links = '<a href="/cart">Cart</a><a href="/login">Sign in</a>'
        error = ERRORS.get(request.query.get("error", ""))
        banner = f'<div class="error" role="alert">{esc(error)}</div>' if error else ""
        return self.page(
            request, f"{title} | Shop", banner + body, nav=f'<a href="/">Home</a>{search}{links}', style=STYLE
        )

    def require_user(self, request: web.Request) -> str:
        user = self.user(request)
        if not user or not self.db.query("SELECT 1 FROM customers WHERE username = ?", (user,)):
            self.redirect("/login?" + urlencode({"next": request.path_qs}))
        return user

    @staticmethod
    def back(path: str, **query: str) -> NoReturn:
        """Redirect to ``path`` with a message code in the query (an error or a confirmation)."""
        WebApp.redirect(path + ("?" + urlencode(query) if query else ""))

    # ------------------------------------------------------------------ catalogue
    async def home(self, request: web.Request) -> web.Response:
        categories = self.db.query("SELECT slug, name FROM categories ORDER BY position")
        links = "".join(f'<li><a href="/category/{slug}">{esc(name)}</a></li>' for slug, name in categories)
        top = self.db.query(f"{_PRODUCT_ROWS} WHERE r.n >= 3 ORDER BY r.total * 1.0 / r.n DESC, r.n DESC, p.id LIMIT 4")
        body = (
            f"<h1>Welcome to the Shop</h1><h2>Shop by category</h2><ul>{links}</ul>"
            f'<h2>Top rated</h2><div class="grid">{"".join(_card(row) for row in top)}</div>'
        )
        return self.shop_page(request, "Home", body)

    async def search(self, request: web.Request) -> web.Response:
        q = request.query.get("q", "").strip()
        words = q.lower().split()
        where = " AND ".join(["lower(p.name || ' ' || p.brand || ' ' || c.name) LIKE ?"] * len(words)) or "1"
        heading = f"Results for “{q}”" if q else "All products"
        return self.listing(request, "/search", heading, where, [f"%{word}%" for word in words], q=q)

    async def category(self, request: web.Request) -> web.Response:
        found = self.db.query("SELECT name FROM categories WHERE slug = ?", (request.match_info["slug"],))
        if not found:
            raise web.HTTPNotFound(text="No such category")
        return self.listing(request, request.path, found[0][0], "p.category = ?", [request.match_info["slug"]])

    def listing(
        self, request: web.Request, path: str, heading: str, where: str, params: list, *, q: str | None = None
    ) -> web.Response:
        """A filterable, sortable, paged product list: the search results or a category."""
        query = request.query
        canonical = _canonical_query(query, search=q is not None)
        if canonical != [(key, value) for key, value in query.items()]:
            self.redirect(path + ("?" + urlencode(canonical) if canonical else ""))
        values = dict(canonical)
        scope = f"FROM products p JOIN categories c ON c.slug = p.category WHERE {where}"
        brands = [row[0] for row in self.db.query(f"SELECT DISTINCT p.brand {scope} ORDER BY p.brand", params)]
        errors, conditions, arguments = [], [], list(params)
        if values.get("brand"):
            conditions.append("p.brand = ?")
            arguments.append(values["brand"])
        bounds = {}
        for key, sign, label in (("min_price", ">=", "Minimum"), ("max_price", "<=", "Maximum")):
            if key in values:
                cents = _cents(values[key])
                if cents is None:
                    errors.append(f"{label} price must be a number, like 25 or 19.99.")
                else:
                    bounds[key] = cents
                    conditions.append(f"p.price {sign} ?")
                    arguments.append(cents)
        if len(bounds) == 2 and bounds["min_price"] > bounds["max_price"]:
            errors.append("Minimum price must not be more than the maximum price.")
        if values.get("rating", "") in RATINGS.keys() - {""}:
            conditions.append("r.total >= ? * r.n")
            arguments.append(int(values["rating"]))
        sort = values.get("sort", "featured") if values.get("sort") in SORTS else "featured"
        filtered = " AND ".join([where] + conditions)
        sql = f"{_PRODUCT_ROWS} JOIN categories c ON c.slug = p.category WHERE {filtered} ORDER BY {SORTS[sort][1]}"
        rows = self.db.query(sql, arguments)
        pages = max(1, -(-len(rows) // PAGE_SIZE))
        page = min(max(1, int(values.get("page", "1"))), pages)
        shown = rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]

        form = (
            f'<form class="filters" action="{esc(path)}" aria-label="Filters"><strong>Filter and sort</strong>'
            + (f'<input type="hidden" name="q" value="{esc(q)}">' if q is not None else "")
            + _select("brand", "Brand", [("", "All brands")] + [(b, b) for b in brands], values.get("brand", ""))
            + f'<label>Min price ($) <input name="min_price" value="{esc(values.get("min_price", ""))}" size="8"></label>'
            + f'<label>Max price ($) <input name="max_price" value="{esc(values.get("max_price", ""))}" size="8"></label>'
            + _select("rating", "Rating", list(RATINGS.items()), values.get("rating", ""))
            + _select("sort", "Sort by", [(key, label) for key, (label, _) in SORTS.items()], sort)
            + "<button>Apply</button></form>"
        )
        problems = "".join(f'<div class="error" role="alert">{esc(error)}</div>' for error in errors)
        if rows:
            first = (page - 1) * PAGE_SIZE + 1
            summary = f"<p>Showing {first}–{first + len(shown) - 1} of {len(rows)} results</p>"
        else:
            summary = "<p>No products match your search.</p>"
        pager = ""
        if pages > 1:

            def link(number: int, text: str) -> str:
                target = urlencode(
                    [(k, v) for k, v in canonical if k != "page"] + ([("page", str(number))] if number > 1 else [])
                )
                return f'<a href="{esc(path)}{"?" + esc(target) if target else ""}">{text}</a>'

            parts = [link(page - 1, "Previous")] if page > 1 else []
            parts += [f"<strong>{n}</strong>" if n == page else link(n, str(n)) for n in range(1, pages + 1)]
            parts += [link(page + 1, "Next")] if page < pages else []
            pager = f'<nav class="pager">Page {page} of {pages}: {" ".join(parts)}</nav>'
        body = (
            f'<div class="crumbs"><a href="/">Home</a> › {esc(heading)}</div><h1>{esc(heading)}</h1>'
            f'<div class="layout">{form}<section>{problems}{summary}'
            f'<div class="grid">{"".join(_card(row) for row in shown)}</div>{pager}</section></div>'
        )
        return self.shop_page(request, heading, body, query=q or "")

    async def product(self, request: web.Request) -> web.Response:
        product_id = int(request.match_info["id"])
        found = self.db.query(
            "SELECT p.name, p.brand, p.price, p.sizes, p.colours, p.description, c.slug, c.name "
            "FROM products p JOIN categories c ON c.slug = p.category WHERE p.id = ?",
            (product_id,),
        )
        if not found:
            raise web.HTTPNotFound(text="No such product")
        name, brand, price, sizes, colours, description, slug, category = found[0]
        reviews = self.db.query(
            "SELECT author, rating, title, body, created FROM reviews WHERE product_id = ? "
            "ORDER BY created DESC, id DESC",
            (product_id,),
        )
        if reviews:
            rating = (
                f"<p>Rated {stars(sum(r[1] for r in reviews), len(reviews))} out of 5 "
                f"({_plural(len(reviews), 'review')})</p>"
            )
        else:
            rating = "<p>No reviews yet</p>"
        variant = ""
        if sizes:
            variant += _select("size", "Size", [("", "Choose a size")] + [(s, s) for s in sizes.split(",")], "")
        if colours:
            variant += _select("colour", "Colour", [("", "Choose a colour")] + [(c, c) for c in colours.split(",")], "")
        flash = '<div class="flash" role="status">Thanks for your review!</div>' if "reviewed" in request.query else ""
        buy = (
            f'<form method="post" action="/product/{product_id}/cart" aria-label="Buy">{variant}'
            f'<label>Quantity <input type="number" name="quantity" value="1" min="1" max="{MAX_QUANTITY}"></label>'
            "<button>Add to cart</button></form>"
        )
        review_list = "".join(
            f'<article class="review"><h3>{esc(title)}</h3><p>{"★" * stars_ + "☆" * (5 - stars_)} {stars_} out of 5 '
            f"— by {esc(author)} on {long_date(created)}</p><p>{esc(body)}</p></article>"
            for author, stars_, title, body, created in reviews
        )
        if self.user(request):
            write = (
                "<h2>Write a review</h2>"
                f'<form method="post" action="/product/{product_id}/reviews" aria-label="Write a review">'
                + _select(
                    "rating",
                    "Your rating",
                    [("", "Choose a rating")] + [(str(n), f"{n} star{'s' if n > 1 else ''}") for n in range(5, 0, -1)],
                    "",
                )
                + '<label>Title <input name="title"></label>'
                '<label>Review <textarea name="body" rows="3" cols="50"></textarea></label>'
                "<button>Submit review</button></form>"
            )
        else:
            write = f'<p><a href="/login?next=/product/{product_id}">Sign in</a> to write a review.</p>'
        body = (
            f'<div class="crumbs"><a href="/">Home</a> › <a href="/category/{slug}">{esc(category)}</a> › '
            f"{esc(name)}</div>{flash}<h1>{esc(name)}</h1>"
            f'<p>Brand: <a href="/category/{slug}?{urlencode({"brand": brand})}">{esc(brand)}</a></p>'
            f'<p class="price">{money(price)}</p>{rating}<p>{esc(description)}</p>{buy}'
            f"<h2>Reviews ({len(reviews)})</h2>{review_list or '<p>Be the first to review this product.</p>'}{write}"
        )
        return self.shop_page(request, name, body)

    async def add_to_cart(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        product_id = int(request.match_info["id"])
        found = self.db.query("SELECT sizes, colours FROM products WHERE id = ?", (product_id,))
        if not found:
            raise web.HTTPNotFound(text="No such product")
        sizes, colours = (value.split(",") if value else [] for value in found[0])
        form = await request.post()
        size, colour = form_value(form, "size"), form_value(form, "colour")
        quantity = _quantity(form_value(form, "quantity"))
        page = f"/product/{product_id}"
        if sizes and size not in sizes:
            self.back(page, error="size")
        if colours and colour not in colours:
            self.back(page, error="colour")
        if quantity is None:
            self.back(page, error="quantity")
        same = self.db.query(
            "SELECT id, quantity FROM cart_items WHERE username = ? AND product_id = ? AND size = ? AND colour = ?",
            (user, product_id, size if sizes else "", colour if colours else ""),
        )
        if same:
            item_id, before = same[0]
            self.db.execute(
                "UPDATE cart_items SET quantity = ? WHERE id = ?", (min(MAX_QUANTITY, before + quantity), item_id)
            )
        else:
            self.db.execute(
                "INSERT INTO cart_items (username, product_id, size, colour, quantity) VALUES (?, ?, ?, ?, ?)",
                (user, product_id, size if sizes else "", colour if colours else "", quantity),
            )
        self.back("/cart", added=str(product_id))

    async def add_review(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        product_id = int(request.match_info["id"])
        form = await request.post()
        page = f"/product/{product_id}"
        rating, title, body = form_value(form, "rating"), form_value(form, "title"), form_value(form, "body")
        if self.db.query("SELECT 1 FROM reviews WHERE product_id = ? AND username = ?", (product_id, user)):
            self.back(page, error="reviewed")
        if rating not in {"1", "2", "3", "4", "5"}:
            self.back(page, error="rating")
        if not title:
            self.back(page, error="title")
        if not body:
            self.back(page, error="body")
        full_name = self.db.query("SELECT name FROM customers WHERE username = ?", (user,))[0][0]
        first, last = full_name.split(" ", 1)
        self.db.execute(
            "INSERT INTO reviews (product_id, username, author, rating, title, body, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (product_id, user, f"{first} {last[0]}.", int(rating), title, body, self.now()),
        )
        self.back(page, reviewed="1")

    # ------------------------------------------------------------------ cart and checkout
    def cart_rows(self, user: str) -> list[tuple]:
        return self.db.query(
            "SELECT ci.id, p.id, p.name, ci.size, ci.colour, ci.quantity, p.price FROM cart_items ci "
            "JOIN products p ON p.id = ci.product_id WHERE ci.username = ? ORDER BY ci.id",
            (user,),
        )

    async def cart(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        rows = self.cart_rows(user)
        flash = ""
        if request.query.get("added", "").isdigit():
            added = self.db.query("SELECT name FROM products WHERE id = ?", (int(request.query["added"]),))
            if added:
                flash = f'<div class="flash" role="status">Added to your cart: {esc(added[0][0])}</div>'
        if "updated" in request.query:
            flash = '<div class="flash" role="status">Your cart was updated.</div>'
        if not rows:
            body = f'{flash}<h1>Your cart</h1><p>Your cart is empty.</p><p><a href="/">Continue shopping</a></p>'
            return self.shop_page(request, "Cart", body)
        lines = []
        for item_id, product_id, name, size, colour, quantity, price in rows:
            label = _item_label(name, size, colour)
            lines.append(
                f'<tr><td><a href="/product/{product_id}">{esc(name)}</a></td><td>{esc(options_text(size, colour))}</td>'
                f'<td>{money(price)}</td><td><form method="post" action="/cart/{item_id}/update">'
                f'<input type="number" name="quantity" value="{quantity}" min="1" max="{MAX_QUANTITY}" '
                f'aria-label="Quantity of {esc(label)}"> <button aria-label="Update quantity of {esc(label)}">Update</button>'
                f'</form></td><td>{money(price * quantity)}</td><td><form method="post" action="/cart/{item_id}/remove">'
                f'<button aria-label="Remove {esc(label)}">Remove</button></form></td></tr>'
            )
        subtotal = sum(row[5] * row[6] for row in rows)
        body = (
            f"{flash}<h1>Your cart</h1><table><tr><th>Product</th><th>Options</th><th>Price</th><th>Quantity</th>"
            f"<th>Total</th><th></th></tr>{''.join(lines)}</table><p>Subtotal: {money(subtotal)}</p>"
            '<p><a href="/checkout">Proceed to checkout</a></p>'
        )
        return self.shop_page(request, "Cart", body)

    def own_cart_item(self, request: web.Request, user: str) -> int:
        item_id = int(request.match_info["id"])
        if not self.db.query("SELECT 1 FROM cart_items WHERE id = ? AND username = ?", (item_id, user)):
            raise web.HTTPNotFound(text="No such cart item")
        return item_id

    async def update_cart(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        item_id = self.own_cart_item(request, user)
        quantity = _quantity(form_value(await request.post(), "quantity"))
        if quantity is None:
            self.back("/cart", error="quantity")
        self.db.execute("UPDATE cart_items SET quantity = ? WHERE id = ?", (quantity, item_id))
        self.back("/cart", updated="1")

    async def remove_from_cart(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        self.db.execute("DELETE FROM cart_items WHERE id = ?", (self.own_cart_item(request, user),))
        self.back("/cart", updated="1")

    async def checkout(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        rows = self.cart_rows(user)
        if not rows:
            return self.shop_page(
                request,
                "Checkout",
                '<h1>Checkout</h1><p>Your cart is empty.</p><p><a href="/">Continue shopping</a></p>',
            )
        items = "".join(
            f"<tr><td>{esc(_item_label(name, size, colour))}</td><td>{quantity}</td>"
            f"<td>{money(price * quantity)}</td></tr>"
            for _, _, name, size, colour, quantity, price in rows
        )
        subtotal = sum(row[5] * row[6] for row in rows)
        addresses = self.db.query(
            "SELECT id, label, name, street, city, zip, is_default FROM addresses WHERE username = ? ORDER BY id",
            (user,),
        )
        address_choices = "".join(
            f'<label><input type="radio" name="address" value="{address_id}"{" checked" if default else ""}> '
            f"{esc(label)}: {esc(address_text(name, street, city, zip_code))}</label>"
            for address_id, label, name, street, city, zip_code, default in addresses
        )
        shipping_choices = "".join(
            f'<label><input type="radio" name="shipping" value="{key}"> {esc(label)} — {money(cents)}</label>'
            for key, (label, cents) in SHIPPING.items()
        )
        card = self.db.query("SELECT card_last4 FROM customers WHERE username = ?", (user,))[0][0]
        payment_choices = "".join(
            f'<label><input type="radio" name="payment" value="{key}"> '
            f"{esc(label + (f' (Visa ending in {card})' if key == 'card' else ''))}</label>"
            for key, label in PAYMENT.items()
        )
        body = (
            "<h1>Checkout</h1><h2>Order summary</h2><table><tr><th>Item</th><th>Quantity</th><th>Price</th></tr>"
            f"{items}</table><p>Subtotal: {money(subtotal)}</p>"
            '<form method="post" action="/checkout" aria-label="Checkout">'
            f"<fieldset><legend>Shipping address</legend>{address_choices}"
            '<a href="/account">Manage addresses</a></fieldset>'
            f"<fieldset><legend>Shipping method</legend>{shipping_choices}</fieldset>"
            f"<fieldset><legend>Payment</legend>{payment_choices}</fieldset>"
            "<button>Place order</button></form>"
        )
        return self.shop_page(request, "Checkout", body)

    async def place_order(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        form = await request.post()
        rows = self.cart_rows(user)
        if not rows:
            self.back("/checkout", error="empty")
        address_id, shipping, payment = (form_value(form, key) for key in ("address", "shipping", "payment"))
        address = self.db.query(
            "SELECT label, name, street, city, zip FROM addresses WHERE id = ? AND username = ?",
            (int(address_id) if address_id.isdigit() else -1, user),
        )
        if not address:
            self.back("/checkout", error="address")
        if shipping not in SHIPPING:
            self.back("/checkout", error="shipping")
        if payment not in PAYMENT:
            self.back("/checkout", error="payment")
        label, *parts = address[0]
        subtotal = sum(row[5] * row[6] for row in rows)
        cost = SHIPPING[shipping][1]
        cursor = self.db.execute(
            "INSERT INTO orders (username, created, status, shipping_method, payment, address_label, address, subtotal, "
            "shipping, total) VALUES (?, ?, 'Processing', ?, ?, ?, ?, ?, ?, ?)",
            (user, self.now(), shipping, payment, label, address_text(*parts), subtotal, cost, subtotal + cost),
        )
        order_id = cursor.lastrowid
        self.db.conn.executemany(
            "INSERT INTO order_items (order_id, product_id, name, size, colour, quantity, unit_price) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (order_id, product_id, name, size, colour, quantity, price)
                for _, product_id, name, size, colour, quantity, price in rows
            ],
        )
        self.db.execute("DELETE FROM cart_items WHERE username = ?", (user,))
        self.back(f"/orders/{order_id}", placed="1")

    # ------------------------------------------------------------------ orders
    async def orders(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        rows = self.db.query(
            "SELECT o.id, o.created, o.status, o.total, SUM(i.quantity) FROM orders o "
            "JOIN order_items i ON i.order_id = o.id WHERE o.username = ? GROUP BY o.id "
            "ORDER BY o.created DESC, o.id DESC",
            (user,),
        )
        lines = "".join(
            f'<tr><td><a href="/orders/{order_id}">Order #{order_id}</a></td><td>{long_date(created)}</td>'
            f"<td>{esc(status)}</td><td>{count}</td><td>{money(total)}</td></tr>"
            for order_id, created, status, total, count in rows
        )
        table = (
            (
                "<table><tr><th>Order</th><th>Placed on</th><th>Status</th><th>Items</th><th>Total</th></tr>"
                f"{lines}</table>"
            )
            if rows
            else "<p>You have not placed any orders yet.</p>"
        )
        return self.shop_page(request, "My orders", f"<h1>My orders</h1>{table}")

    async def order(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        order_id = int(request.match_info["id"])
        found = self.db.query(
            "SELECT created, status, shipping_method, payment, address_label, address, subtotal, "
            "shipping, total FROM orders WHERE id = ? AND username = ?",
            (order_id, user),
        )
        if not found:
            raise web.HTTPNotFound(text="No such order")
        created, status, shipping, payment, label, address, subtotal, cost, total = found[0]
        items = self.db.query(
            "SELECT product_id, name, size, colour, quantity, unit_price FROM order_items "
            "WHERE order_id = ? ORDER BY id",
            (order_id,),
        )
        lines = "".join(
            f'<tr><td><a href="/product/{product_id}">{esc(name)}</a></td>'
            f"<td>{esc(options_text(size, colour))}</td><td>{quantity}</td><td>{money(price)}</td>"
            f"<td>{money(price * quantity)}</td></tr>"
            for product_id, name, size, colour, quantity, price in items
        )
        flash = ""
        if "placed" in request.query:
            flash = f'<div class="flash" role="status">Thank you! Your order #{order_id} has been placed.</div>'
        elif "cancelled" in request.query:
            flash = f'<div class="flash" role="status">Order #{order_id} was cancelled.</div>'
        cancel = (
            f'<form method="post" action="/orders/{order_id}/cancel"><button>Cancel order</button></form>'
            if status == "Processing"
            else ""
        )
        body = (
            f'{flash}<div class="crumbs"><a href="/orders">My orders</a> › Order #{order_id}</div>'
            f"<h1>Order #{order_id}</h1><p>Placed on {long_date(created)} at {created[11:16]}</p>"
            f"<p>Status: {esc(status)}</p><p>Ship to ({esc(label)}): {esc(address)}</p>"
            f"<p>Shipping: {esc(SHIPPING[shipping][0])}</p><p>Payment: {esc(PAYMENT[payment])}</p>"
            "<table><tr><th>Product</th><th>Options</th><th>Quantity</th><th>Price</th><th>Total</th></tr>"
            f"{lines}</table><p>Subtotal: {money(subtotal)}</p><p>Shipping: {money(cost)}</p>"
            f"<p><strong>Order total: {money(total)}</strong></p>{cancel}"
        )
        return self.shop_page(request, f"Order #{order_id}", body)

    async def cancel_order(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        order_id = int(request.match_info["id"])
        found = self.db.query("SELECT status FROM orders WHERE id = ? AND username = ?", (order_id, user))
        if not found:
            raise web.HTTPNotFound(text="No such order")
        if found[0][0] != "Processing":
            self.back(f"/orders/{order_id}", error="not_cancellable")
        self.db.execute("UPDATE orders SET status = 'Cancelled' WHERE id = ?", (order_id,))
        self.back(f"/orders/{order_id}", cancelled="1")

    # ------------------------------------------------------------------ account
    async def account(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        name, email = self.db.query("SELECT name, email FROM customers WHERE username = ?", (user,))[0]
        addresses = self.db.query(
            "SELECT id, label, name, street, city, zip, is_default FROM addresses WHERE username = ? ORDER BY id",
            (user,),
        )
        cards = []
        for address_id, label, who, street, city, zip_code, default in addresses:
            if default:
                actions = "<p><strong>Default address</strong></p>"
            else:
                actions = (
                    f'<form method="post" action="/account/addresses/{address_id}/default">'
                    f'<button aria-label="Make {esc(label)} my default address">Set as default</button></form>'
                )
            actions += (
                f'<form method="post" action="/account/addresses/{address_id}/delete">'
                f'<button aria-label="Delete {esc(label)} address">Delete</button></form>'
            )
            cards.append(
                f'<div class="address"><h3>{esc(label)}</h3><p>{esc(who)}</p><p>{esc(street)}</p>'
                f"<p>{esc(city)} {esc(zip_code)}</p>{actions}</div>"
            )
        flash = (
            '<div class="flash" role="status">Your address book was updated.</div>' if "saved" in request.query else ""
        )
        body = (
            f"{flash}<h1>My account</h1><p>Name: {esc(name)}</p><p>Email: {esc(email)}</p>"
            f"<h2>Address book</h2>{''.join(cards)}<h2>Add an address</h2>"
            '<form method="post" action="/account/addresses" aria-label="Add an address">'
            '<label>Label <input name="label" placeholder="e.g. Home"></label>'
            '<label>Full name <input name="name"></label><label>Street <input name="street"></label>'
            '<label>City <input name="city"></label><label>ZIP code <input name="zip"></label>'
            '<label><input type="checkbox" name="default"> Make this my default address</label>'
            "<button>Save address</button></form>"
        )
        return self.shop_page(request, "My account", body)

    async def add_address(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        form = await request.post()
        fields = {key: form_value(form, key) for key in ("label", "name", "street", "city", "zip")}
        for key, value in fields.items():
            if not value:
                self.back("/account", error=key)
        if not (fields["zip"].isdigit() and len(fields["zip"]) == 5):
            self.back("/account", error="zip")
        if self.db.query(
            "SELECT 1 FROM addresses WHERE username = ? AND lower(label) = lower(?)", (user, fields["label"])
        ):
            self.back("/account", error="label_taken")
        make_default = bool(form.get("default"))
        if make_default:
            self.db.execute("UPDATE addresses SET is_default = 0 WHERE username = ?", (user,))
        self.db.execute(
            "INSERT INTO addresses (username, label, name, street, city, zip, is_default) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (user, *fields.values(), int(make_default)),
        )
        self.back("/account", saved="1")

    def own_address(self, request: web.Request, user: str) -> tuple[int, bool]:
        found = self.db.query(
            "SELECT id, is_default FROM addresses WHERE id = ? AND username = ?", (int(request.match_info["id"]), user)
        )
        if not found:
            raise web.HTTPNotFound(text="No such address")
        return found[0][0], bool(found[0][1])

    async def set_default_address(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        address_id, _ = self.own_address(request, user)
        self.db.execute("UPDATE addresses SET is_default = (id = ?) WHERE username = ?", (address_id, user))
        self.back("/account", saved="1")

    async def delete_address(self, request: web.Request) -> web.Response:
        user = self.require_user(request)
        address_id, default = self.own_address(request, user)
        if default:
            self.back("/account", error="delete_default")
        self.db.execute("DELETE FROM addresses WHERE id = ?", (address_id,))
        self.back("/account", saved="1")

    # ------------------------------------------------------------------ signing in
    async def login_form(self, request: web.Request) -> web.Response:
        target = request.query.get("next", "/")
        body = (
            '<h1>Sign in</h1><form method="post" action="/login" aria-label="Sign in">'
            f'<input type="hidden" name="next" value="{esc(target)}">'
            '<label>Username <input name="username" autocomplete="off"></label>'
            '<label>Password <input type="password" name="password" autocomplete="off"></label>'
            "<button>Sign in</button></form>"
        )
        return self.shop_page(request, "Sign in", body)

    async def login(self, request: web.Request) -> web.Response:
        form = await request.post()
        username, password = form_value(form, "username"), form_value(form, "password")
        target = form_value(form, "next", "/")
        if not self.db.query("SELECT 1 FROM customers WHERE username = ? AND password = ?", (username, password)):
            self.back("/login", error="login", next=target)
        response = web.Response(status=303, headers={"Location": target if target.startswith("/") else "/"})
        response.set_cookie("user", username, path="/")
        return response

    async def logout(self, request: web.Request) -> web.Response:
        response = web.Response(status=303, headers={"Location": "/"})
        response.del_cookie("user", path="/")
        return response


_PRODUCT_ROWS = (
    "SELECT p.id, p.name, p.brand, p.price, r.total, r.n FROM products p LEFT JOIN "
    "(SELECT product_id, SUM(rating) AS total, COUNT(*) AS n FROM reviews GROUP BY product_id) r "
    "ON r.product_id = p.id"
)


def _card(row: tuple) -> str:
    product_id, name, brand, price, total, count = row
    rating = f"{stars(total, count)} out of 5 ({_plural(count, 'review')})" if count else "No reviews yet"
    return (
        f'<div class="card"><a href="/product/{product_id}">{esc(name)}</a><div>{esc(brand)}</div>'
        f'<div class="price">{money(price)}</div><div>{rating}</div></div>'
    )


def _select(name: str, label: str, options: list[tuple[str, str]], chosen: str) -> str:
    items = "".join(
        f'<option value="{esc(value)}"{" selected" if value == chosen else ""}>{esc(text)}</option>'
        for value, text in options
    )
    # A separate label (not wrapping the select) keeps the options out of the select's accessible name.
    return f'<label for="field-{name}">{esc(label)}</label> <select id="field-{name}" name="{name}">{items}</select>'


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _item_label(name: str, size: str, colour: str) -> str:
    options = options_text(size, colour)
    return f"{name} ({options})" if options else name


def _quantity(text: str) -> int | None:
    return int(text) if text.isdigit() and 1 <= int(text) <= MAX_QUANTITY else None


def _cents(text: str) -> int | None:
    try:
        value = float(text.lstrip("$").replace(",", ""))
    except ValueError:
        return None
    return round(value * 100) if value >= 0 else None


def _price_text(text: str) -> str:
    """A price filter as written in canonical URLs: '20.00' → '20', '$19.5' → '19.50'; junk stays (and is reported)."""
    cents = _cents(text)
    if cents is None:
        return text
    return str(cents // 100) if cents % 100 == 0 else f"{cents / 100:.2f}"


def _canonical_query(query, *, search: bool) -> list[tuple[str, str]]:
    """The listing query in canonical form: known keys in a fixed order, empty and default values dropped."""
    canonical = []
    for key in LISTING_KEYS if search else LISTING_KEYS[1:]:
        value = query.get(key, "").strip()
        if key == "q":
            # Kept even when empty (the search page's own parameter); search ignores case and spacing, so its URL does.
            canonical.append((key, " ".join(value.lower().split())))
            continue
        if key in ("min_price", "max_price"):
            value = _price_text(value)
        if (key == "sort" and value == "featured") or (key == "page" and (not value.isdigit() or int(value) <= 1)):
            continue
        if value:
            canonical.append((key, value))
    return canonical
