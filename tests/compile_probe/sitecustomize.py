"""Imported at start-up by tests/test_compiled_decode.py's runs (it puts this folder first on PYTHONPATH and sets
VERITUNE_COMPILE_PROBE): at exit, torch.compile's counters and the shape of every ``generate`` call (padded
prompt width, unpadded prompt lengths) go to that JSON file. Outside such a run it does nothing."""

import atexit
import json
import os

_OUT = os.environ.get("VERITUNE_COMPILE_PROBE")

if _OUT:
    from transformers.generation.utils import GenerationMixin

    _calls: list[dict] = []
    _generate = GenerationMixin.generate

    def _recorded_generate(self, *args, **kwargs):
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is not None and mask is not None:
            _calls.append({"width": ids.shape[1], "lengths": mask.sum(1).tolist(), "batch": ids.shape[0]})
        return _generate(self, *args, **kwargs)

    GenerationMixin.generate = _recorded_generate

    def _dump() -> None:
        from torch._dynamo.utils import counters

        figures = {name: dict(values) for name, values in counters.items()}
        with open(_OUT, "w") as sink:
            json.dump({"counters": figures, "generate": _calls}, sink)

    atexit.register(_dump)
