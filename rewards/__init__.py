"""Reward modules, one file per family, each reward registered by name with ``@reward``.

``mmreason list rewards`` prints them all; ``mmreason reward NAME --completion TEXT --column k=v`` tries one.

- ``format``:    tag schemas (think/answer, DocSeeker, tool calls, knowledge-base routing steps)
- ``accuracy``:  numeric, relaxed accuracy, ANLS, VQA exact match / recall, yes/no
- ``choice``:    multiple-choice letter extraction (``mcq``)
- ``mathverify``: symbolic math answers through math-verify (``math``)
- ``evidence``:  evidence pages (F-beta), temporal IoU, timestamp hits, tool-window grounding
- ``tools``:     tool-call validity against a schema
- ``length``:    response-length trapezoid, DAPO's overlong penalty
- ``retrieval``: R1-Router step reward (sub-question similarity + knowledge-base choice)
- ``grounding``: bounding-box IoU in the original image's coordinates
- ``judge``:     a local VLM that looks at the images and scores the completion
- ``benchmark_rules``: what the published-benchmark packs share (answer extraction by rule, DocVQA's ANLS,
  option lists written as strings)

Shared, bounded-time parsing lives in ``parsing`` and ``textmatch``: use it in new rewards.
"""
