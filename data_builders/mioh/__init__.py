"""MIOH-format multi-image questions from COCO-format instances ("Fine-Grained Multi-Image Object Hallucination
Benchmark", Sec. 3 and App. A.3-A.4): ``veritune build mioh-rft``."""
