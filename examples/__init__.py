"""Runnable examples: neural networks trained online by L-RVGA
(``python -m examples.<name>``)."""
