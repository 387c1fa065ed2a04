"""Generation: decoding one token at a time, sampling, teacher forcing."""
