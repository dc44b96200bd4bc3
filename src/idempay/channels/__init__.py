"""Channel adapters, one per channel, each implementing domain.ports.Channel."""
