"""The transformer of "Attention Is All You Need", written from scratch, and its decoder-only variant."""
