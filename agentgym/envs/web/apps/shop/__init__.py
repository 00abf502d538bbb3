"""The shop app for web envs: an online store with a catalogue, product variants and reviews, a cart, checkout, orders and an address book, and its task templates."""

from agentgym.envs.web.apps.shop.app import ShopApp as App
from agentgym.envs.web.apps.shop.templates import tasks

__all__ = ["App", "tasks"]
