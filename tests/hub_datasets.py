"""A Hub dataset made available offline the way ``datasets`` itself caches one.

``datasets.load_dataset("org/name", config)`` of a data-file Hub repository runs a packaged builder (``json``,
``parquet``) whose ``repo_id`` and ``dataset_name`` place its Arrow files in
``HF_DATASETS_CACHE/org___name/<config>/<version>/<hash>/``; with ``HF_HUB_OFFLINE=1`` a later
``load_dataset("org/name", config)`` reads that cache (``datasets.load.CachedDatasetModuleFactory``). Here the
same builder prepares the same folder from local files, so the offline load is the one a user gets after
a first online one.
"""

from __future__ import annotations

from pathlib import Path

from datasets.data_files import DataFilesDict


def cache_hub_dataset(repo_id: str, config: str, splits: dict[str, Path], cache_dir: Path) -> None:
    """Prepare ``repo_id`` (config ``config``) in the ``datasets`` cache ``cache_dir`` from local JSON lines or
    parquet files, one per split."""
    suffixes = {path.suffix for path in splits.values()}
    if suffixes == {".parquet"}:
        from datasets.packaged_modules.parquet.parquet import Parquet as Builder
    else:
        from datasets.packaged_modules.json.json import Json as Builder
    builder = Builder(
        dataset_name=repo_id.split("/")[-1],
        repo_id=repo_id,
        config_name=config,
        config_id=config,
        hash="0123456789abcdef",
        cache_dir=str(cache_dir),
    )
    # data files of a Hub repository are hf:// paths; these are local, so they are set after the check
    builder.config.data_files = DataFilesDict.from_patterns({split: [str(p)] for split, p in splits.items()})
    builder.download_and_prepare()
