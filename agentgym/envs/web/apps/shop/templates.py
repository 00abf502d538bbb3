"""The shop's task templates: each picks its instances from the seeded catalogue, states the goal as a shopper would, and carries an evaluator and a scripted reference solution that works through the UI.

Solutions look every element up by role and name in the observation (never by a fixed id).
Expected answers and rows are computed from :func:`~agentgym.envs.web.apps.shop.data.catalog` in
plain Python, independently of the app's SQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence

from agentgym.envs.web.apps.shop.data import (
    CATEGORIES,
    CUSTOMERS,
    PAYMENT,
    SHIPPING,
    Catalog,
    Order,
    Product,
    address_text,
    catalog,
    money,
    options_text,
)
from agentgym.envs.web.observation import element_id
from agentgym.envs.web.tasks import AllOf, AnswerExact, AnswerIncludes, AnswerNumber, DbCheck, Step, UrlMatch, WebTask

__all__ = ["tasks", "TEMPLATES"]

PER_TEMPLATE = 12
CATEGORY_NAMES = dict(CATEGORIES)
PASSWORDS = {username: password for username, _, _, password, _ in CUSTOMERS}
SORT_LABELS = {
    "price_asc": "Price: low to high",
    "price_desc": "Price: high to low",
    "rating": "Customer rating",
    "reviews": "Most reviewed",
}
RATING_LABELS = {4: "4 stars & up", 3: "3 stars & up", 2: "2 stars & up"}

# ---------------------------------------------------------------------------- solution steps


def _act(action: str, role: str, name: str, *arguments: str, exact: bool = True, nth: int = 0) -> Step:
    def step(observation: str) -> str:
        found = element_id(observation, role, name, exact=exact, nth=nth)
        return f"{action}({found}{''.join(', ' + json.dumps(argument) for argument in arguments)})"

    return step


def click(role: str, name: str, **kwargs) -> Step:
    return _act("click", role, name, **kwargs)


def fill(name: str, text: str, role: str = "textbox") -> Step:
    return _act("fill", role, name, text)


def select(name: str, option: str) -> Step:
    return _act("select_option", "combobox", name, option)


def check(role: str, name: str) -> Step:
    return _act("check", role, name, exact=False)


def answer(text: str = "") -> str:
    return f"answer({json.dumps(text)})"


def search(query: str) -> tuple[Step, ...]:
    return fill("Search products", query, role="searchbox"), click("button", "Search")


def open_product(product: Product) -> tuple[Step, ...]:
    return search(product.name) + (click("link", product.name),)


def open_category(slug: str) -> tuple[Step, ...]:
    return (click("link", CATEGORY_NAMES[slug]),)


def filters(
    *,
    brand: str | None = None,
    low: int | None = None,
    high: int | None = None,
    rating: int | None = None,
    sort: str | None = None,
) -> tuple[Step, ...]:
    steps: list[Step] = []
    if brand is not None:
        steps.append(select("Brand", brand))
    if low is not None:
        steps.append(fill("Min price ($)", str(low)))
    if high is not None:
        steps.append(fill("Max price ($)", str(high)))
    if rating is not None:
        steps.append(select("Rating", RATING_LABELS[rating]))
    if sort is not None:
        steps.append(select("Sort by", SORT_LABELS[sort]))
    return (*steps, click("button", "Apply"))


def open_order(order: Order) -> tuple[Step, ...]:
    return click("link", "My orders"), click("link", f"Order #{order.id}")


# ---------------------------------------------------------------------------- helpers on the data


def spread(items: Sequence, count: int = PER_TEMPLATE) -> list:
    """``count`` items evenly spread over ``items`` (all of them if there are fewer): varied, deterministic."""
    items = list(items)
    if len(items) <= count:
        return items
    return [items[index * len(items) // count] for index in range(count)]


def price(cents: int) -> str:
    """A price as an answer mentions it: '19.49'."""
    return money(cents).lstrip("$")


def in_category(data: Catalog, slug: str, brand: str | None = None) -> list[Product]:
    return [p for p in data.products if p.category == slug and (brand is None or p.brand == brand)]


def matching(data: Catalog, query: str) -> list[Product]:
    """The products a search finds: every word in the name, brand or category name."""
    words = query.lower().split()
    return [
        p
        for p in data.products
        if all(word in f"{p.name} {p.brand} {CATEGORY_NAMES[p.category]}".lower() for word in words)
    ]


def kinds(data: Catalog) -> list[str]:
    """Product kinds whose search finds exactly the products of that kind."""
    found = []
    for kind in dict.fromkeys(p.kind for p in data.products):
        if {p.id for p in matching(data, kind)} == {p.id for p in data.products if p.kind == kind}:
            found.append(kind)
    return found


def pairs(data: Catalog) -> list[tuple[str, str]]:
    """(category, brand) pairs that have products."""
    return list(dict.fromkeys((p.category, p.brand) for p in data.products))


def cart_rows(data: Catalog, username: str, extra: Sequence[tuple] = ()) -> tuple[tuple, ...]:
    rows = [(item.product_id, item.size, item.colour, item.quantity) for item in data.cart_of(username)]
    return tuple(sorted(rows + list(extra)))


def cart_check(username: str, rows: tuple[tuple, ...]) -> DbCheck:
    return DbCheck(
        "SELECT product_id, size, colour, quantity FROM cart_items WHERE username = ? "
        "ORDER BY product_id, size, colour, quantity",
        rows,
        (username,),
        f"{username}'s cart is {rows}",
    )


def variant_words(size: str, colour: str) -> str:
    return " ".join(part for part in (f"in size {size}" if size else "", f"in {colour}" if colour else "") if part)


def item_label(product: Product, size: str, colour: str) -> str:
    options = options_text(size, colour)
    return f"{product.name} ({options})" if options else product.name


def naming(data: Catalog, names: Sequence[str], *also: str) -> AnswerIncludes:
    """An answer naming these products (and mentioning ``also``) and no other product of the catalogue."""
    return AnswerIncludes((*names, *also), tuple(p.name for p in data.products if p.name not in names))


def dated_orders(data: Catalog) -> list[Order]:
    """Orders whose date no other customer ordered on: "the order I placed on D" then reads the same for everyone."""
    users: dict[str, set[str]] = {}
    for order in data.orders:
        users.setdefault(order.date, set()).add(order.username)
    return [order for order in data.orders if len(users[order.date]) == 1]


def default_address(data: Catalog, username: str):
    return next(address for address in data.addresses_of(username) if address.is_default)


# ---------------------------------------------------------------------------- information seeking


def cheapest_brand_in_category(data: Catalog) -> Iterator[tuple]:
    for slug, brand in spread(pairs(data)):
        product = min(in_category(data, slug, brand), key=lambda p: p.price)
        goal = f"What's the cheapest {brand} product in the {CATEGORY_NAMES[slug]} category, and how much is it?"
        steps = (
            open_category(slug)
            + filters(brand=brand, sort="price_asc")
            + (answer(f"{product.name}, {money(product.price)}"),)
        )
        yield goal, naming(data, [product.name], price(product.price)), steps, {}


def cheapest_kind(data: Catalog) -> Iterator[tuple]:
    for kind in spread(kinds(data)):
        product = min(matching(data, kind), key=lambda p: p.price)
        goal = f"Find the cheapest {kind.lower()} you sell. What is it called?"
        steps = search(kind.lower()) + filters(sort="price_asc") + (answer(product.name),)
        yield goal, naming(data, [product.name]), steps, {}


def priciest_well_rated(data: Catalog) -> Iterator[tuple]:
    for slug, _ in CATEGORIES:
        for minimum in (4, 3):
            rated = [p for p in in_category(data, slug) if data.reviews_of(p.id) and data.mean_rating(p.id) >= minimum]
            product = max(rated, key=lambda p: p.price)
            goal = (
                f"What is the most expensive {CATEGORY_NAMES[slug]} product with an average rating of at least "
                f"{minimum} stars? Give its name."
            )
            steps = open_category(slug) + filters(rating=minimum, sort="price_desc") + (answer(product.name),)
            yield goal, naming(data, [product.name]), steps, {}


def review_count(data: Catalog) -> Iterator[tuple]:
    for product in spread(data.products[3::7]):
        count = len(data.reviews_of(product.id))
        goal = f"How many reviews does the {product.name} have?"
        yield goal, AnswerNumber(count), open_product(product) + (answer(str(count)),), {}


def product_rating(data: Catalog) -> Iterator[tuple]:
    reviewed = [p for p in data.products if data.reviews_of(p.id)]
    for product in spread(reviewed[5::5]):
        rating = data.rating(product.id)
        goal = f"What is the average customer rating of the {product.name}?"
        yield goal, AnswerNumber(float(rating), 0.05), open_product(product) + (answer(rating),), {}


def brand_count(data: Catalog) -> Iterator[tuple]:
    for slug, brand in spread(pairs(data)[1::2]):
        count = len(in_category(data, slug, brand))
        goal = f"How many {brand} products are there in the {CATEGORY_NAMES[slug]} section?"
        steps = open_category(slug) + filters(brand=brand) + (answer(str(count)),)
        yield goal, AnswerNumber(count), steps, {}


def price_range_count(data: Catalog) -> Iterator[tuple]:
    bands = [(10, 30), (20, 60), (25, 75), (50, 100), (30, 90), (100, 200)]
    for index, (slug, _) in enumerate(CATEGORIES):
        for low, high in (bands[index], bands[(index + 3) % len(bands)]):
            count = sum(low * 100 <= p.price <= high * 100 for p in in_category(data, slug))
            goal = f"How many {CATEGORY_NAMES[slug]} products cost between ${low} and ${high}?"
            steps = open_category(slug) + filters(low=low, high=high) + (answer(str(count)),)
            yield goal, AnswerNumber(count), steps, {}


def best_rated_kind(data: Catalog) -> Iterator[tuple]:
    found = []
    for kind in kinds(data):
        ranked = sorted(
            (p for p in matching(data, kind) if data.reviews_of(p.id)), key=lambda p: -data.mean_rating(p.id)
        )
        if len(ranked) >= 2 and data.mean_rating(ranked[0].id) > data.mean_rating(ranked[1].id):
            found.append((kind, ranked[0]))
    for kind, product in spread(found):
        goal = f"Which {kind.lower()} has the best average customer rating?"
        steps = search(kind.lower()) + filters(sort="rating") + (answer(product.name),)
        yield goal, naming(data, [product.name]), steps, {}


def review_by(data: Catalog) -> Iterator[tuple]:
    for review in spread(data.reviews[2::11]):
        product = data.product(review.product_id)
        goal = f"What star rating did {review.author} give the {product.name}?"
        yield goal, AnswerNumber(review.rating), open_product(product) + (answer(f"{review.rating} stars"),), {}


def order_items_on_date(data: Catalog) -> Iterator[tuple]:
    for order in spread(dated_orders(data)[1::2]):
        names = [item.name for item in order.items]
        goal = f"What did I order on {order.date}?"
        steps = open_order(order) + (answer(", ".join(names)),)
        yield goal, naming(data, names), steps, {"user": order.username}


#: Which order, by position in the customer's history, and how a customer says it (each customer gets two).
ORDER_POSITIONS = [
    (-1, "my most recent order"),
    (-2, "my second most recent order"),
    (0, "my very first order"),
    (-3, "my third most recent order"),
    (1, "my second order"),
    (-4, "my fourth most recent order"),
    (2, "my third order"),
    (-5, "my fifth most recent order"),
    (3, "my fourth order"),
    (-6, "my sixth most recent order"),
]


def order_total(data: Catalog) -> Iterator[tuple]:
    for index, (position, words) in enumerate(ORDER_POSITIONS):
        username = CUSTOMERS[index // 2][0]
        order = data.orders_of(username)[position]
        goal = f"What was the total of {words}?"
        steps = open_order(order) + (answer(money(order.total)),)
        yield goal, AnswerNumber(order.total / 100, 0.005), steps, {"user": username}


def order_status(data: Catalog) -> Iterator[tuple]:
    for order in spread(dated_orders(data)[::2]):
        goal = f"What is the status of the order I placed on {order.date}?"
        steps = (click("link", "My orders"), answer(order.status))
        yield goal, AnswerExact(order.status), steps, {"user": order.username}


def sign_in_and_count(data: Catalog) -> Iterator[tuple]:
    for username, *_ in CUSTOMERS:
        orders = data.orders_of(username)
        for status in (None, "Delivered"):
            count = sum(status is None or order.status == status for order in orders)
            question = "how many orders I have placed" if status is None else "how many of my orders were delivered"
            goal = f"Sign in as {username} (password: {PASSWORDS[username]}) and tell me {question}."
            steps = (
                click("link", "Sign in"),
                fill("Username", username),
                fill("Password", PASSWORDS[username]),
                click("button", "Sign in"),
                click("link", "My orders"),
                answer(str(count)),
            )
            yield goal, AnswerNumber(count), steps, {"user": None}


# ---------------------------------------------------------------------------- navigation


def browse_brand_sorted(data: Catalog) -> Iterator[tuple]:
    for index, (slug, brand) in enumerate(spread(pairs(data)[::2])):
        sort = ("price_asc", "price_desc")[index % 2]
        order = "from cheapest to most expensive" if sort == "price_asc" else "from most expensive to cheapest"
        goal = f"Show me {brand}'s products in {CATEGORY_NAMES[slug]}, sorted by price {order}."
        steps = open_category(slug) + filters(brand=brand, sort=sort) + (answer(),)
        yield goal, UrlMatch(f"/category/{slug}", (("brand", brand), ("sort", sort))), steps, {}


def search_price_band(data: Catalog) -> Iterator[tuple]:
    bands = [(10, 40), (20, 50), (25, 100), (15, 60), (50, 150), (30, 80)]
    for index, kind in enumerate(spread(kinds(data)[1::2])):
        low, high = bands[index % len(bands)]
        query = kind.lower()
        goal = f'Search the shop for "{query}" and narrow the results to prices from ${low} to ${high}.'
        steps = search(query) + filters(low=low, high=high) + (answer(),)
        expected = (("q", query), ("min_price", str(low)), ("max_price", str(high)))
        yield goal, UrlMatch("/search", expected), steps, {}


def browse_top_rated(data: Catalog) -> Iterator[tuple]:
    for slug, name in CATEGORIES:
        for minimum in (4, 3):
            goal = f"Show me {name} products rated {minimum} stars and up, best rated first."
            steps = open_category(slug) + filters(rating=minimum, sort="rating") + (answer(),)
            yield goal, UrlMatch(f"/category/{slug}", (("rating", str(minimum)), ("sort", "rating"))), steps, {}


def open_standout_product(data: Catalog) -> Iterator[tuple]:
    for slug, name in CATEGORIES:
        products = in_category(data, slug)
        priciest = max(products, key=lambda p: p.price)
        yield (
            f"Open the product page of the most expensive item in {name}.",
            UrlMatch(f"/product/{priciest.id}"),
            open_category(slug) + filters(sort="price_desc") + (click("link", priciest.name), answer()),
            {},
        )
        counts = sorted(products, key=lambda p: -len(data.reviews_of(p.id)))
        if len(data.reviews_of(counts[0].id)) > len(data.reviews_of(counts[1].id)):
            top = counts[0]
            yield (
                f"Take me to the page of the {name} product with the most reviews.",
                UrlMatch(f"/product/{top.id}"),
                open_category(slug) + filters(sort="reviews") + (click("link", top.name), answer()),
                {},
            )


def open_order_of_date(data: Catalog) -> Iterator[tuple]:
    for order in spread(dated_orders(data)[::-2]):
        goal = f"Show me the details of the order I placed on {order.date}."
        steps = open_order(order) + (answer(),)
        yield goal, UrlMatch(f"/orders/{order.id}"), steps, {"user": order.username}


# ---------------------------------------------------------------------------- changing state


def _shoppers() -> list[str]:
    return [username for username, *_ in CUSTOMERS]


def add_variant(data: Catalog) -> Iterator[tuple]:
    sized = [p for p in data.products if p.sizes and p.colours]
    for index, product in enumerate(spread(sized[1::3])):
        username = _shoppers()[index % 5]
        if any(item.product_id == product.id for item in data.cart_of(username)):
            continue
        size, colour, quantity = product.sizes[index % len(product.sizes)], product.colours[-1], 1 + index % 3
        goal = f"Add {quantity} of the {product.name} in size {size}, colour {colour}, to my cart."
        steps = open_product(product) + (
            select("Size", size),
            select("Colour", colour),
            fill("Quantity", str(quantity)),
            click("button", "Add to cart"),
            answer(),
        )
        rows = cart_rows(data, username, [(product.id, size, colour, quantity)])
        yield goal, cart_check(username, rows), steps, {"user": username}


def add_plain(data: Catalog) -> Iterator[tuple]:
    plain = [p for p in data.products if not p.sizes]
    for index, product in enumerate(spread(plain[2::4])):
        username = _shoppers()[(index + 2) % 5]
        if any(item.product_id == product.id for item in data.cart_of(username)):
            continue
        colour = product.colours[0] if product.colours else ""
        quantity = 1 + index % 4
        goal = f"Put {quantity} {product.name} {variant_words('', colour)} in my cart.".replace("  ", " ")
        steps = (
            open_product(product)
            + ((select("Colour", colour),) if colour else ())
            + (fill("Quantity", str(quantity)), click("button", "Add to cart"), answer())
        )
        rows = cart_rows(data, username, [(product.id, "", colour, quantity)])
        yield goal, cart_check(username, rows), steps, {"user": username}


def cheapest_to_cart(data: Catalog) -> Iterator[tuple]:
    simple = [kind for kind in kinds(data) if not any(p.sizes or p.colours for p in matching(data, kind))]
    for kind, quantity in spread([(kind, quantity) for kind in simple for quantity in (1, 2)]):
        username = "erin"
        product = min(matching(data, kind), key=lambda p: p.price)
        what = f"a {kind.lower()}" if quantity == 1 else f"{quantity} {kind.lower()}s"
        goal = f"I need {what}: add the cheapest one you have to my cart ({quantity} in total)."
        steps = (
            search(kind.lower())
            + filters(sort="price_asc")
            + (click("link", product.name), fill("Quantity", str(quantity)), click("button", "Add to cart"), answer())
        )
        rows = cart_rows(data, username, [(product.id, "", "", quantity)])
        yield goal, cart_check(username, rows), steps, {"user": username}


def change_quantity(data: Catalog) -> Iterator[tuple]:
    for index, item in enumerate(spread(data.cart)):
        product = data.product(item.product_id)
        quantity = item.quantity + 1 + index % 3
        goal = f"Change the quantity of the {item_label(product, item.size, item.colour)} in my cart to {quantity}."
        label = item_label(product, item.size, item.colour)
        steps = (
            click("link", "Cart", exact=False),
            fill(f"Quantity of {label}", str(quantity), role="textbox"),
            click("button", f"Update quantity of {label}"),
            answer(),
        )
        rows = tuple(
            sorted(
                (c.product_id, c.size, c.colour, quantity if c.id == item.id else c.quantity)
                for c in data.cart_of(item.username)
            )
        )
        yield goal, cart_check(item.username, rows), steps, {"user": item.username}


def remove_item(data: Catalog) -> Iterator[tuple]:
    for item in spread(data.cart[::-1]):
        product = data.product(item.product_id)
        label = item_label(product, item.size, item.colour)
        goal = f"Remove the {label} from my cart."
        steps = (click("link", "Cart", exact=False), click("button", f"Remove {label}"), answer())
        rows = tuple(
            sorted((c.product_id, c.size, c.colour, c.quantity) for c in data.cart_of(item.username) if c.id != item.id)
        )
        yield goal, cart_check(item.username, rows), steps, {"user": item.username}


def _latest_order(username: str, expected: tuple, note: str) -> DbCheck:
    return DbCheck(
        "SELECT username, status, shipping_method, payment, address_label, subtotal, shipping, total "
        "FROM orders WHERE id = (SELECT MAX(id) FROM orders)",
        (expected,),
        (),
        note,
    )


def checkout_steps(label: str, method: str, payment: str) -> tuple[Step, ...]:
    return (
        check("radio", f"{label}: "),
        check("radio", SHIPPING[method][0]),
        check("radio", PAYMENT[payment]),
        click("button", "Place order"),
    )


def checkout(data: Catalog) -> Iterator[tuple]:
    combos = [(u, m, p) for u in _shoppers()[:4] for m in SHIPPING for p in PAYMENT]
    goals: set[tuple[str, str, str]] = set()
    for index, (username, method, payment) in enumerate(combos):
        addresses = data.addresses_of(username)
        address = addresses[index % len(addresses)]
        if (address.label, method, payment) in goals or len(goals) == PER_TEMPLATE:
            continue  # the goal must tell the tasks apart, and does not name the customer
        goals.add((address.label, method, payment))
        subtotal = sum(item.quantity * data.product(item.product_id).price for item in data.cart_of(username))
        cost = SHIPPING[method][1]
        goal = (
            f"Check out my cart: ship it to my {address.label} address with {SHIPPING[method][0].split(' (')[0]} "
            f"shipping and pay with {PAYMENT[payment]}."
        )
        steps = (
            click("link", "Cart", exact=False),
            click("link", "Proceed to checkout"),
            *checkout_steps(address.label, method, payment),
            answer(),
        )
        expected = (username, "Processing", method, payment, address.label, subtotal, cost, subtotal + cost)
        evaluator = AllOf((_latest_order(username, expected, f"a new order {expected}"), cart_check(username, ())))
        yield goal, evaluator, steps, {"user": username}


def buy_now(data: Catalog) -> Iterator[tuple]:
    products = [p for p in data.products if p.colours]
    combos = list(zip(spread(products[4::5]), [(m, p) for p in PAYMENT for m in SHIPPING] * 2))
    for index, (product, (method, payment)) in enumerate(combos):
        size = product.sizes[-1 - index % 2] if product.sizes else ""
        colour = product.colours[index % len(product.colours)]
        quantity = 1 + index % 2
        total = quantity * product.price + SHIPPING[method][1]
        speed = SHIPPING[method][0].split(" (")[0]
        goal = (
            f"Buy {quantity} {product.name} {variant_words(size, colour)}, shipped {speed} to my default address "
            f"and paid with {PAYMENT[payment]}. What is the order total?"
        )
        steps = (
            open_product(product)
            + ((select("Size", size),) if size else ())
            + (
                select("Colour", colour),
                fill("Quantity", str(quantity)),
                click("button", "Add to cart"),
                click("link", "Proceed to checkout"),
                check("radio", SHIPPING[method][0]),
                check("radio", PAYMENT[payment]),
                click("button", "Place order"),
                answer(money(total)),
            )
        )
        home = default_address(data, "erin")
        expected = (
            "erin",
            "Processing",
            method,
            payment,
            home.label,
            total - SHIPPING[method][1],
            SHIPPING[method][1],
            total,
        )
        items = DbCheck(
            "SELECT product_id, size, colour, quantity FROM order_items WHERE order_id = (SELECT MAX(id) FROM orders)",
            ((product.id, size, colour, quantity),),
            description="the new order holds exactly that item",
        )
        evaluator = AllOf(
            (_latest_order("erin", expected, f"a new order {expected}"), items, AnswerNumber(total / 100, 0.005))
        )
        yield goal, evaluator, steps, {"user": "erin"}


def _status_check(username: str, data: Catalog, cancelled: int) -> DbCheck:
    rows = tuple((o.id, "Cancelled" if o.id == cancelled else o.status) for o in data.orders_of(username))
    return DbCheck(
        "SELECT id, status FROM orders WHERE username = ? ORDER BY id",
        rows,
        (username,),
        f"order #{cancelled} is cancelled and {username}'s other orders are unchanged",
    )


def cancel_order(data: Catalog) -> Iterator[tuple]:
    for order in [o for o in data.orders if o.status == "Processing"]:
        goal = f"Please cancel my order #{order.id}."
        steps = open_order(order) + (click("button", "Cancel order"), answer())
        yield goal, _status_check(order.username, data, order.id), steps, {"user": order.username}


def cancel_order_of_date(data: Catalog) -> Iterator[tuple]:
    for order in [o for o in dated_orders(data) if o.status == "Processing"]:
        goal = f"I changed my mind about the order I placed on {order.date}; cancel it."
        steps = open_order(order) + (click("button", "Cancel order"), answer())
        yield goal, _status_check(order.username, data, order.id), steps, {"user": order.username}


def set_default_address(data: Catalog) -> Iterator[tuple]:
    for address in [a for a in data.addresses if not a.is_default]:
        goal = f"Change my default address to my {address.label} address ({address.street}, {address.city})."
        rows = tuple((a.id, int(a.id == address.id)) for a in data.addresses_of(address.username))
        check_ = DbCheck(
            "SELECT id, is_default FROM addresses WHERE username = ? ORDER BY id",
            rows,
            (address.username,),
            f"address {address.id} is {address.username}'s only default",
        )
        steps = (click("link", "My account"), click("button", f"Make {address.label} my default address"), answer())
        yield goal, check_, steps, {"user": address.username}


NEW_ADDRESSES = [
    ("Gym", "12 Granite Way", "Riverton", "40512"),
    ("Office", "400 Market Street", "Lakewood", "73001"),
    ("Beach House", "7 Dune Road", "Clearwater", "33755"),
    ("Grandma", "88 Linden Avenue", "Milton", "02186"),
    ("Storage", "5 Depot Lane", "Ashford", "06278"),
]


def add_address(data: Catalog) -> Iterator[tuple]:
    for index, (username, name, *_) in enumerate(CUSTOMERS * 2):
        label, street, city, zip_code = NEW_ADDRESSES[(index * 2) % len(NEW_ADDRESSES)]
        default = index >= len(CUSTOMERS)
        goal = f"Add a new address labelled '{label}' to my address book: {name}, {street}, {city} {zip_code}" + (
            ", and make it my default address." if default else "."
        )
        steps = (
            click("link", "My account"),
            fill("Label", label),
            fill("Full name", name),
            fill("Street", street),
            fill("City", city),
            fill("ZIP code", zip_code),
            *((check("checkbox", "Make this my default address"),) if default else ()),
            click("button", "Save address"),
            answer(),
        )
        rows = tuple((a.label, a.street, int(a.is_default and not default)) for a in data.addresses_of(username))
        rows += ((label, street, int(default)),)
        address_check = DbCheck(
            "SELECT label, street, is_default FROM addresses WHERE username = ? ORDER BY id",
            rows,
            (username,),
            f"{username}'s address book is {rows}",
        )
        full = DbCheck(
            "SELECT name, city, zip FROM addresses WHERE username = ? AND label = ?",
            ((name, city, zip_code),),
            (username, label),
            f"the {label} address is {address_text(name, street, city, zip_code)}",
        )
        yield goal, AllOf((address_check, full)), steps, {"user": username}


REVIEW_TEXTS = [
    ("Great value", "Works as described and arrived quickly."),
    ("Not for me", "The fit was off for me."),
    ("Solid buy", "Sturdy and well finished."),
    ("Could be better", "Decent, but the finish is rough."),
    ("Love it", "I use it every day."),
]


def leave_review(data: Catalog) -> Iterator[tuple]:
    for index, product in enumerate(spread(data.products[6::9])):
        username = _shoppers()[index % 5]
        rating = 5 - index % 5
        title, body = REVIEW_TEXTS[index % len(REVIEW_TEXTS)]
        goal = f'Leave a {rating}-star review of the {product.name} titled "{title}" that says "{body}"'
        steps = open_product(product) + (
            select("Your rating", f"{rating} star{'s' if rating > 1 else ''}"),
            fill("Title", title),
            fill("Review", body),
            click("button", "Submit review"),
            answer(),
        )
        check_ = DbCheck(
            "SELECT product_id, rating, title, body FROM reviews WHERE username = ?",
            ((product.id, rating, title, body),),
            (username,),
            f"{username} reviewed product {product.id}",
        )
        yield goal, check_, steps, {"user": username}


#: Template name → generator of (goal, evaluator, solution, options) from the catalogue.
TEMPLATES: dict[str, Callable[[Catalog], Iterator[tuple]]] = {
    "cheapest_brand_in_category": cheapest_brand_in_category,
    "cheapest_kind": cheapest_kind,
    "priciest_well_rated": priciest_well_rated,
    "review_count": review_count,
    "product_rating": product_rating,
    "brand_count": brand_count,
    "price_range_count": price_range_count,
    "best_rated_kind": best_rated_kind,
    "review_by": review_by,
    "order_items_on_date": order_items_on_date,
    "order_total": order_total,
    "order_status": order_status,
    "sign_in_and_count": sign_in_and_count,
    "browse_brand_sorted": browse_brand_sorted,
    "search_price_band": search_price_band,
    "browse_top_rated": browse_top_rated,
    "open_standout_product": open_standout_product,
    "open_order_of_date": open_order_of_date,
    "add_variant": add_variant,
    "add_plain": add_plain,
    "cheapest_to_cart": cheapest_to_cart,
    "change_quantity": change_quantity,
    "remove_item": remove_item,
    "checkout": checkout,
    "buy_now": buy_now,
    "cancel_order": cancel_order,
    "cancel_order_of_date": cancel_order_of_date,
    "set_default_address": set_default_address,
    "add_address": add_address,
    "leave_review": leave_review,
}

#: Who is signed in when a template's options do not say (a customer with a cart and a history).
DEFAULT_USER = "alice"


def tasks() -> list[WebTask]:
    """Every instance of every template, ids ``<template>/<n>`` (deterministic)."""
    data = catalog()
    found = []
    for template, generate in TEMPLATES.items():
        for index, (goal, evaluator, solution, options) in enumerate(generate(data)):
            found.append(
                WebTask(
                    f"{template}/{index}",
                    template,
                    goal,
                    evaluator,
                    tuple(solution),
                    start_path="/",
                    user=options.get("user", DEFAULT_USER),
                    params=dict(options),
                )
            )
    return found
