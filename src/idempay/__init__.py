"""idempay: a payment gateway that charges each payment intent once and finds its outcome."""

__version__ = "0.1.0"
