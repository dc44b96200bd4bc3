"""idempay: a payment gateway that charges a payment intent at most once and always finds its outcome."""

__version__ = "0.1.0"
