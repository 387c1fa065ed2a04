"""The toy tasks, the shipped toy models trained on them, their runner, and the trainer."""
