"""Tiny offline models for the demo and the tests: random-initialised VLMs (:mod:`veritune.tiny.models`),
a tiny CLIP (:mod:`veritune.tiny.clip`) and the ``veritune tiny-model`` command (:mod:`veritune.tiny.cli`)."""
