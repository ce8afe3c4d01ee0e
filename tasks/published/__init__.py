"""What the published-benchmark packs (``mathvista``, ``mmmu``, ``chartqa``, ``docvqa``, ``videomme``) share; no
pack is registered here.

- ``files``: reading a benchmark's files as published (JSON keyed by id, ``{"data": [...]}``, JSON Lines, one
  parquet file or a folder of them), image fields (a path beside the file or the parquet ``{"bytes", "path"}``
  struct), the loaded rows' skip counts and header notes;
- ``rules``: answer extraction by rule, ANLS at the DocVQA threshold, option lists written as a string;
- ``breakdown``: accuracy per group of a metadata field (category, subject, duration, ...), the way each
  benchmark's scores file breaks its accuracy down.
"""
