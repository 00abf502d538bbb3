"""The shop's schema and its seeded catalogue, customers, carts and order history, generated deterministically (the same rows in every process).

:func:`catalog` is the single source of truth: the app copies it into SQLite, and the task
templates read it to pick instances and compute the expected answers and rows.
"""

from __future__ import annotations

import datetime
import random
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import cache

SCHEMA = """
CREATE TABLE categories (slug TEXT PRIMARY KEY, name TEXT NOT NULL, position INTEGER NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, category TEXT NOT NULL REFERENCES categories,
    brand TEXT NOT NULL, kind TEXT NOT NULL, price INTEGER NOT NULL, sizes TEXT NOT NULL, colours TEXT NOT NULL,
    description TEXT NOT NULL);
CREATE TABLE reviews (id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES products, username TEXT,
    author TEXT NOT NULL, rating INTEGER NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE customers (username TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, password TEXT NOT NULL,
    card_last4 TEXT NOT NULL);
CREATE TABLE addresses (id INTEGER PRIMARY KEY, username TEXT NOT NULL REFERENCES customers, label TEXT NOT NULL,
    name TEXT NOT NULL, street TEXT NOT NULL, city TEXT NOT NULL, zip TEXT NOT NULL, is_default INTEGER NOT NULL);
CREATE TABLE cart_items (id INTEGER PRIMARY KEY, username TEXT NOT NULL REFERENCES customers,
    product_id INTEGER NOT NULL REFERENCES products, size TEXT NOT NULL, colour TEXT NOT NULL,
    quantity INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, username TEXT NOT NULL REFERENCES customers, created TEXT NOT NULL,
    status TEXT NOT NULL, shipping_method TEXT NOT NULL, payment TEXT NOT NULL, address_label TEXT NOT NULL,
    address TEXT NOT NULL, subtotal INTEGER NOT NULL, shipping INTEGER NOT NULL, total INTEGER NOT NULL);
CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL REFERENCES orders,
    product_id INTEGER NOT NULL REFERENCES products, name TEXT NOT NULL, size TEXT NOT NULL, colour TEXT NOT NULL,
    quantity INTEGER NOT NULL, unit_price INTEGER NOT NULL);
"""

#: Shipping methods: key → (label, price in cents).
SHIPPING = {
    "standard": ("Standard (5-7 business days)", 499),
    "express": ("Express (2-3 business days)", 1299),
    "next_day": ("Next day", 2499),
}
#: Payment options: key → label (the card's last digits are the customer's own).
PAYMENT = {"card": "Credit card", "paypal": "PayPal", "gift_card": "Gift card"}

CATEGORIES = [
    ("clothing", "Clothing"),
    ("shoes", "Shoes"),
    ("kitchen", "Kitchen"),
    ("electronics", "Electronics"),
    ("home", "Home & Living"),
    ("outdoors", "Outdoors"),
]

CLOTHES_SIZES = ("XS", "S", "M", "L", "XL")
SHOE_SIZES = ("7", "8", "9", "10", "11", "12")
PALETTE = ("Black", "White", "Navy", "Grey", "Red", "Olive", "Sand", "Teal", "Burgundy", "Sky Blue")

# kind, category, price range in dollars, sizes, whether it comes in colours
KINDS = [
    ("T-Shirt", "clothing", (9, 35), CLOTHES_SIZES, True),
    ("Hoodie", "clothing", (29, 79), CLOTHES_SIZES, True),
    ("Jacket", "clothing", (49, 199), CLOTHES_SIZES, True),
    ("Jeans", "clothing", (35, 110), CLOTHES_SIZES, True),
    ("Sweater", "clothing", (30, 120), CLOTHES_SIZES, True),
    ("Running Shoes", "shoes", (45, 160), SHOE_SIZES, True),
    ("Sneakers", "shoes", (39, 120), SHOE_SIZES, True),
    ("Boots", "shoes", (69, 220), SHOE_SIZES, True),
    ("Sandals", "shoes", (19, 70), SHOE_SIZES, True),
    ("Mug", "kitchen", (6, 24), (), True),
    ("Kettle", "kitchen", (19, 89), (), True),
    ("Frying Pan", "kitchen", (15, 120), (), False),
    ("Knife Set", "kitchen", (25, 240), (), False),
    ("Cutting Board", "kitchen", (12, 60), (), False),
    ("Headphones", "electronics", (19, 349), (), True),
    ("Speaker", "electronics", (25, 299), (), True),
    ("Charger", "electronics", (9, 59), (), False),
    ("Keyboard", "electronics", (25, 180), (), True),
    ("Mouse", "electronics", (12, 99), (), True),
    ("Lamp", "home", (19, 150), (), True),
    ("Pillow", "home", (12, 60), (), True),
    ("Blanket", "home", (20, 130), (), True),
    ("Vase", "home", (14, 90), (), True),
    ("Wall Clock", "home", (18, 85), (), False),
    ("Backpack", "outdoors", (25, 180), (), True),
    ("Tent", "outdoors", (79, 499), (), False),
    ("Water Bottle", "outdoors", (9, 45), (), True),
    ("Sleeping Bag", "outdoors", (39, 260), (), False),
    ("Camp Chair", "outdoors", (19, 120), (), True),
]

BRANDS = {
    "clothing": ["Northwind", "Fernwood", "Kestrel", "Maple & Co", "Urbanline"],
    "shoes": ["Stride", "Kestrel", "Trailhead", "Urbanline", "Pace"],
    "kitchen": ["Copperleaf", "Hearth", "Maple & Co", "Brightline", "Ironside"],
    "electronics": ["Voltra", "Lumen", "Orbit", "Brightline", "Soundry"],
    "home": ["Lumen", "Hearth", "Maple & Co", "Fernwood", "Nook"],
    "outdoors": ["Trailhead", "Summit", "Northwind", "Kestrel", "Ridgeback"],
}

ADJECTIVES = [
    "Classic",
    "Everyday",
    "Pro",
    "Essential",
    "Lightweight",
    "Premium",
    "Compact",
    "Heritage",
    "Urban",
    "Alpine",
    "Coastal",
    "Studio",
    "Voyager",
    "Nordic",
    "Deluxe",
    "Original",
    "Ultra",
    "Eco",
    "Vintage",
    "Modern",
]

REVIEW_LINES = {
    5: [
        ("Love it", "Exactly what I wanted, great quality."),
        ("Excellent", "Better than expected. Would buy again."),
        ("Perfect", "Does the job perfectly and looks great."),
        ("Five stars", "Fast delivery and superb build."),
    ],
    4: [
        ("Very good", "Solid product, a couple of small niggles."),
        ("Happy with it", "Good value for the money."),
        ("Nice", "Works well, looks nice, slightly pricey."),
    ],
    3: [
        ("It's okay", "Does what it says but nothing special."),
        ("Average", "Fine for the price, not great."),
        ("Mixed feelings", "Some things good, some not."),
    ],
    2: [("Disappointed", "Quality is not what I hoped for."), ("Meh", "Started showing wear after a few weeks.")],
    1: [("Poor", "Broke almost immediately."), ("Do not buy", "Returned it the same week.")],
}

REVIEWERS = [
    "Priya S.",
    "Tom H.",
    "Lena K.",
    "Marco R.",
    "Sofia G.",
    "Jamal B.",
    "Hannah W.",
    "Kenji T.",
    "Olivia P.",
    "Ravi N.",
    "Grace L.",
    "Mateo F.",
    "Zoe A.",
    "Ethan C.",
    "Nora V.",
    "Samir D.",
]

CUSTOMERS = [
    ("alice", "Alice Martin", "alice.martin@example.com", "alice-pass", "4242"),
    ("bob", "Bob Chen", "bob.chen@example.com", "bob-pass", "1881"),
    ("carol", "Carol Diaz", "carol.diaz@example.com", "carol-pass", "5100"),
    ("dave", "Dave Okafor", "dave.okafor@example.com", "dave-pass", "7733"),
    ("erin", "Erin Walsh", "erin.walsh@example.com", "erin-pass", "3096"),
]

STREETS = [
    "Oak Street",
    "Maple Avenue",
    "Harbor Road",
    "Elm Court",
    "Cedar Lane",
    "Willow Way",
    "Station Road",
    "Hillside Drive",
    "Bridge Street",
    "Park Row",
    "Mill Lane",
    "Orchard Close",
]
CITIES = [
    "Springfield",
    "Riverton",
    "Lakewood",
    "Fairview",
    "Greenville",
    "Ashford",
    "Brookside",
    "Milton",
    "Clearwater",
    "Westbury",
]
LABELS = ["Home", "Work", "Parents", "Cabin", "Studio"]

#: Seeded orders lie between these dates (before the app's epoch, 2026-01-05).
HISTORY = (datetime.date(2025, 8, 1), datetime.date(2026, 1, 4))


@dataclass(frozen=True)
class Product:
    id: int
    name: str
    category: str
    brand: str
    kind: str
    price: int  # cents
    sizes: tuple[str, ...]
    colours: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class Review:
    id: int
    product_id: int
    author: str
    rating: int
    title: str
    body: str
    created: str


@dataclass(frozen=True)
class Address:
    id: int
    username: str
    label: str
    name: str
    street: str
    city: str
    zip: str
    is_default: bool

    @property
    def text(self) -> str:
        return address_text(self.name, self.street, self.city, self.zip)


@dataclass(frozen=True)
class CartItem:
    id: int
    username: str
    product_id: int
    size: str
    colour: str
    quantity: int


@dataclass(frozen=True)
class OrderItem:
    product_id: int
    name: str
    size: str
    colour: str
    quantity: int
    unit_price: int


@dataclass(frozen=True)
class Order:
    id: int
    username: str
    created: str
    status: str
    shipping_method: str
    payment: str
    address_label: str
    address: str
    items: tuple[OrderItem, ...]

    @property
    def subtotal(self) -> int:
        return sum(item.quantity * item.unit_price for item in self.items)

    @property
    def shipping(self) -> int:
        return SHIPPING[self.shipping_method][1]

    @property
    def total(self) -> int:
        return self.subtotal + self.shipping

    @property
    def date(self) -> str:
        return long_date(self.created)


@dataclass(frozen=True)
class Catalog:
    products: tuple[Product, ...]
    reviews: tuple[Review, ...]
    addresses: tuple[Address, ...]
    cart: tuple[CartItem, ...]
    orders: tuple[Order, ...]

    def product(self, product_id: int) -> Product:
        return self.products[product_id - 1]

    def reviews_of(self, product_id: int) -> list[Review]:
        return [review for review in self.reviews if review.product_id == product_id]

    def rating(self, product_id: int) -> str | None:
        ratings = [review.rating for review in self.reviews_of(product_id)]
        return stars(sum(ratings), len(ratings)) if ratings else None

    def mean_rating(self, product_id: int) -> float:
        ratings = [review.rating for review in self.reviews_of(product_id)]
        return sum(ratings) / len(ratings) if ratings else 0.0

    def addresses_of(self, username: str) -> list[Address]:
        return [address for address in self.addresses if address.username == username]

    def cart_of(self, username: str) -> list[CartItem]:
        return [item for item in self.cart if item.username == username]

    def orders_of(self, username: str) -> list[Order]:
        return [order for order in self.orders if order.username == username]


def money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def stars(total: int, count: int) -> str:
    """The average rating as shown: one decimal, halves rounded up (the same everywhere, unlike float rounding)."""
    return str((Decimal(total) / Decimal(count)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def long_date(timestamp: str) -> str:
    """'2025-11-04 10:32' → 'November 4, 2025'."""
    day = datetime.date.fromisoformat(timestamp[:10])
    return f"{day:%B} {day.day}, {day.year}"


def address_text(name: str, street: str, city: str, zip_code: str) -> str:
    return f"{name}, {street}, {city} {zip_code}"


def options_text(size: str, colour: str) -> str:
    """'Size M, Navy' — how a chosen variant is written in the cart and on orders."""
    return ", ".join(part for part in (f"Size {size}" if size else "", colour) if part)


@cache
def catalog() -> Catalog:
    rng = random.Random(20260105)
    products = _products(rng)
    reviews = _reviews(rng, products)
    addresses = _addresses(rng)
    cart = _carts(rng, products)
    orders = _orders(rng, products, addresses)
    return Catalog(tuple(products), tuple(reviews), tuple(addresses), tuple(cart), tuple(orders))


def _products(rng: random.Random) -> list[Product]:
    products: list[Product] = []
    names: set[str] = set()
    prices: set[int] = set()  # all prices distinct, so "the cheapest" never ties
    for kind, category, (low, high), sizes, coloured in KINDS:
        for brand in rng.sample(BRANDS[category], 4):
            for _ in range(rng.choice((1, 1, 2))):
                name = f"{brand} {rng.choice(ADJECTIVES)} {kind}"
                while name in names:
                    name = f"{brand} {rng.choice(ADJECTIVES)} {kind}"
                names.add(name)
                price = rng.randint(low, high) * 100 + rng.choice((99, 99, 49, 0, 95))
                while price in prices:
                    price += 100
                prices.add(price)
                colours = tuple(sorted(rng.sample(PALETTE, rng.randint(2, 4)), key=PALETTE.index)) if coloured else ()
                quality = rng.choice(["durable", "thoughtfully designed", "versatile", "well made"])
                appeal = rng.choice(["easy to care for", "built to last", "great value", "a customer favourite"])
                description = f"The {name} from {brand}: {quality} and {appeal}."
                products.append(
                    Product(len(products) + 1, name, category, brand, kind, price, sizes, colours, description)
                )
    return products


def _reviews(rng: random.Random, products: list[Product]) -> list[Review]:
    reviews: list[Review] = []
    for product in products:
        quality = rng.choice((2, 3, 3, 4, 4, 4, 5))
        for author in rng.sample(REVIEWERS, rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8))):
            rating = max(1, min(5, quality + rng.choice((-2, -1, 0, 0, 0, 1, 1))))
            title, body = rng.choice(REVIEW_LINES[rating])
            day = HISTORY[0] + datetime.timedelta(days=rng.randrange((HISTORY[1] - HISTORY[0]).days))
            reviews.append(Review(len(reviews) + 1, product.id, author, rating, title, body, f"{day} 12:00"))
    return reviews


def _addresses(rng: random.Random) -> list[Address]:
    addresses: list[Address] = []
    for username, name, *_ in CUSTOMERS:
        labels = LABELS[:2] + rng.sample(LABELS[2:], rng.randint(0, 2))
        default = rng.randrange(len(labels))
        for index, label in enumerate(labels):
            street = f"{rng.randint(2, 240)} {rng.choice(STREETS)}"
            addresses.append(
                Address(
                    len(addresses) + 1,
                    username,
                    label,
                    name,
                    street,
                    rng.choice(CITIES),
                    f"{rng.randint(10000, 99999)}",
                    index == default,
                )
            )
    return addresses


def _variant(rng: random.Random, product: Product) -> tuple[str, str]:
    return (rng.choice(product.sizes) if product.sizes else "", rng.choice(product.colours) if product.colours else "")


def _carts(rng: random.Random, products: list[Product]) -> list[CartItem]:
    cart: list[CartItem] = []
    for username, *_ in CUSTOMERS[:4]:  # erin's cart starts empty
        for product in rng.sample(products, rng.randint(2, 4)):
            size, colour = _variant(rng, product)
            cart.append(CartItem(len(cart) + 1, username, product.id, size, colour, rng.randint(1, 3)))
    return cart


def _orders(rng: random.Random, products: list[Product], addresses: list[Address]) -> list[Order]:
    drafts = []
    span = (HISTORY[1] - HISTORY[0]).days
    for username, *_ in CUSTOMERS:
        days = sorted(rng.sample(range(span + 1), rng.randint(6, 9)))  # distinct days: "the order of date D" is one
        own = [address for address in addresses if address.username == username]
        for rank, day in enumerate(days):
            recent = len(days) - rank
            status = (
                "Processing"
                if recent <= 2
                else "Shipped"
                if recent <= 3
                else rng.choice(("Delivered", "Delivered", "Delivered", "Cancelled"))
            )
            created = f"{HISTORY[0] + datetime.timedelta(days=day)} {rng.randint(8, 21):02d}:{rng.randint(0, 59):02d}"
            address = rng.choice(own)
            items = []
            for product in rng.sample(products, rng.randint(1, 3)):
                size, colour = _variant(rng, product)
                items.append(OrderItem(product.id, product.name, size, colour, rng.randint(1, 2), product.price))
            drafts.append(
                (
                    created,
                    username,
                    status,
                    rng.choice(list(SHIPPING)),
                    rng.choice(list(PAYMENT)),
                    address,
                    tuple(items),
                )
            )
    drafts.sort(key=lambda draft: draft[0])  # order numbers grow with time across customers
    return [
        Order(1001 + index, username, created, status, shipping, payment, address.label, address.text, items)
        for index, (created, username, status, shipping, payment, address, items) in enumerate(drafts)
    ]


def populate(db) -> None:
    """Create the schema and insert :func:`catalog`'s rows into ``db`` (a SQLiteState)."""
    data = catalog()
    conn = db.conn
    conn.executescript(SCHEMA)
    conn.executemany(
        "INSERT INTO categories VALUES (?, ?, ?)",
        [(slug, name, index) for index, (slug, name) in enumerate(CATEGORIES)],
    )
    conn.executemany(
        "INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (p.id, p.name, p.category, p.brand, p.kind, p.price, ",".join(p.sizes), ",".join(p.colours), p.description)
            for p in data.products
        ],
    )
    conn.executemany(
        "INSERT INTO reviews VALUES (?, ?, NULL, ?, ?, ?, ?, ?)",
        [(r.id, r.product_id, r.author, r.rating, r.title, r.body, r.created) for r in data.reviews],
    )
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?)", CUSTOMERS)
    conn.executemany(
        "INSERT INTO addresses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(a.id, a.username, a.label, a.name, a.street, a.city, a.zip, int(a.is_default)) for a in data.addresses],
    )
    conn.executemany(
        "INSERT INTO cart_items VALUES (?, ?, ?, ?, ?, ?)",
        [(c.id, c.username, c.product_id, c.size, c.colour, c.quantity) for c in data.cart],
    )
    conn.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                o.id,
                o.username,
                o.created,
                o.status,
                o.shipping_method,
                o.payment,
                o.address_label,
                o.address,
                o.subtotal,
                o.shipping,
                o.total,
            )
            for o in data.orders
        ],
    )
    conn.executemany(
        "INSERT INTO order_items (order_id, product_id, name, size, colour, quantity, unit_price) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (o.id, i.product_id, i.name, i.size, i.colour, i.quantity, i.unit_price)
            for o in data.orders
            for i in o.items
        ],
    )
