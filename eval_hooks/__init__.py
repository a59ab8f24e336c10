"""Hallucination benchmarks, scored as their official code scores them, and the hooks that rerun them
after every checkpoint."""
