"""FINER-Tuning data (FINER, arXiv 2603.17662, Sec. 3, App. G): preference tuples that pair a
fine-grained positive phrase Ψ+ with a minimally edited negative Ψ− over objects (OBJ), attributes
(ATTR), relations (REL) and "what" questions (WH)."""
