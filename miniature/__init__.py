"""The CPU miniature: the ORIC and FINER experiments end to end on a CPU, offline (``veritune demo``).

Read :mod:`miniature.pipeline` top to bottom like a run script; its stages are in :mod:`miniature.stages`.
The rest is what only the miniature uses: the synthetic image world (:mod:`miniature.world`) and its FINER-layout
scene graphs (:mod:`miniature.scene_graphs`), the tiny models (:mod:`miniature.tiny`), FINER on a base that sees
(:mod:`miniature.finer_half`) and the dev-split replay-ratio selection (:mod:`miniature.selection`). Its recipes are
in ``recipes/miniature/``; its command line is wired in ``veritune/`` (``demo_cli.py``, ``tiny_cli.py``,
``world_cli.py``).
"""
