"""Tiny offline models for the demo and the tests: random-initialised VLMs (:mod:`miniature.tiny.models`),
a tiny CLIP (:mod:`miniature.tiny.clip`) and the ``veritune tiny-model`` command (:mod:`veritune.tiny_cli`)."""
