"""The evaluation harness: task packs -> prompt builder -> batched generation -> metrics, lmms-eval style.

``evaluate(EvalConfig)`` runs `mmreason eval`; ``score_task`` is the per-task core shared with the
in-training hook (``in_training.evaluate_during_training``) and the overhead benchmark (``bench``).
"""
