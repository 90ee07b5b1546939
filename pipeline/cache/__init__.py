"""The content-addressed stage cache: skip a stage whose inputs, params and code are unchanged.

A stage's key is a hash of everything its output depends on:

- its resolved params (``description`` aside) and the keys of its input stages, so a change
  reruns the stage and everything downstream of it, nothing else;
- what its kind declares beyond that (``register_stage(fingerprint=...)``): a ``load``
  declares the *contents* of the files it reads (SHA-256 over every byte; size + mtime would
  miss a file rewritten in place within the same second), a ``python`` stage the source of
  the user's module. A kind whose fingerprint is None for a spec is never cached (stages on
  partitioned Dask data: their outputs are lazy views of files in one run's folder), and
  neither is anything downstream of it;
- the code it runs (``StageKind.code_modules``): the source of its kind's module, of the
  modules of the objects its spec holds or names (a feature op's class, a ``train`` stage's
  model entry with its format and rules, found by their ``__module__``; a ``python`` stage's
  module), of the backend's module, and of every module of the package those import, directly
  or transitively (``pipeline.core.import_graph``, read once per process with ``ast``; a
  plugin's or a user's module counts by its file and what it imports of the package); plus
  the package's version. An edit to one of them reruns the stage and what follows it; an
  edit anywhere else (the report, the CLI, another stage kind) reruns nothing. The code that
  writes and reads an entry's pickle (``output_pickling``) is in every key;
- the backend and the versions of its libraries, and the run's seed.

An entry is a folder ``<runs_dir>/<pipeline>/.cache/<key>/`` holding the pickled output
(``output.pkl``, pickle protocol 5, with its buffers beside it in ``buffers/``, packed where
small, ``buffers/layout.json`` saying where each lies), the
stage's artifact files (hard links to the run's) and ``record.json`` with the sha256 of each.
It is built under a temporary name and renamed into place, so an entry is complete or absent
(a write that dies leaves a hidden ``.tmp-`` folder, removed later); on lookup
every checksum is verified and an entry that fails is moved aside and recomputed, never
loaded; so is one whose ``record.json`` is not the object ``store`` writes (``null``, a list,
missing or wrong-typed fields): a bad entry costs a recomputation, never the run.

The cache has a size limit (``cache.max_size`` in the config, ``$PIPELINE_CACHE_MAX_SIZE``
overrides it; default 5 GiB). After a run, the least recently used entries are evicted until
the cache fits, except the entries that run wrote or used; a hit marks an entry used by
touching its folder's mtime (no file is rewritten). A fixed default rather than a share of
free disk: the limit must not move when other files fill or free the disk, or the same run
would evict differently from one night to the next. Entries, like runs, are removed by
renaming them aside first (``.corrupt-``/``.evicted-``), so a concurrent reader sees a whole
entry or none; leftovers of interrupted removals and writes are removed later.

The cache folder is mode 0700 whatever the umask: entries hold pickled outputs (copies of
the input data among them), and loading a pickle runs code, so a user who could write an
entry could run code as whoever runs the pipeline next, and one who could read it could
read the data.

Signed entries: the checksums sit beside the files they protect, so a writer of the runs
folder could replace an output and its checksum together. With a signing key set
(``PIPELINE_SIGNING_KEY``/``_FILE``, ``pipeline.runs.signing``) ``store`` signs ``record.json``
(``record.json.sig``, HMAC-SHA256, written in the temporary folder before the rename), and
``lookup`` sets aside, like a corrupt one, an entry whose record is unsigned, signed with
another key or changed, or that holds a file its record does not list: checked before
anything is unpickled, and the record parsed is the bytes whose signature was checked. The
record lists every file's sha256, so its signature covers them all. Without a key nothing is
signed or checked.

The package, by job: ``keys`` (``stage_key``), ``entries`` (an entry's folder: written,
verified, signed, set aside), ``output_pickling`` (the output's pickle stream and its buffers),
``stored_buffers`` (equal buffers linked, not written again), ``artifact_links`` (artifacts
linked into an entry and back), ``eviction`` (the size limit and housekeeping), and
``StageCache`` (``stage_cache``), the one object the runner and ``pipeline cache`` use.
"""

from pipeline.cache.entries import CacheEntry, PendingEntry
from pipeline.cache.eviction import (
    DEFAULT_MAX_SIZE, ENV_MAX_SIZE, STALE_TMP_SECONDS, EntryInfo, format_size, least_recently_used, resolve_max_size,
)
from pipeline.cache.keys import stage_key
from pipeline.cache.stage_cache import StageCache

__all__ = [
    "DEFAULT_MAX_SIZE", "ENV_MAX_SIZE", "STALE_TMP_SECONDS", "CacheEntry", "EntryInfo", "PendingEntry", "StageCache",
    "format_size", "least_recently_used", "resolve_max_size", "stage_key",
]
