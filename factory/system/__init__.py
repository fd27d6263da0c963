"""What the factory asks of the machine it runs on, below every step: the container engine."""
