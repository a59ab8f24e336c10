"""The ORIC builder (arXiv 2509.15695, Sec. 3.1, App. A.1–A.2): yes/no object-existence
questions under contextual incongruity, from COCO-format annotations.

- positives: objects in the region of interest (small classes, Alg. 1) that a judge cannot predict from
  the rest of the scene (LLM-guided sampling, Fig. 6);
- negatives: absent classes most plausible for a visually similar image (CLIP-guided sampling, Alg. 2).
"""
