"""Dataset builders: ORIC yes/no questions, FINER preference tuples and MCQs, and a synthetic COCO-format
image world for demos and tests."""
