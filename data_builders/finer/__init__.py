"""FINER-Tuning data (seed ``finer_tuning_dpo.txt``, Sec. 3, App. G): preference tuples that pair a
fine-grained positive phrase Ψ+ with a minimally edited negative Ψ− over objects (OBJ), attributes
(ATTR), relations (REL) and "what" questions (WH)."""
