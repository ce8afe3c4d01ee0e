"""The default reward of the videoqa pack: ``scoring.videoqa_accuracy``, the accuracy rule of the eval metric by
answer type (an option letter, a number, a word, a ``[start, end]`` span at tIoU >= 0.5), scored the same way in
training; the pack has no reward of its own."""

REWARDS = [{"name": "mmreason.tasks.videoqa.scoring:videoqa_accuracy", "weight": 1.0}]
