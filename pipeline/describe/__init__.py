"""Descriptors: scikit-learn-style transformers from a batch of decoded images to rows."""
