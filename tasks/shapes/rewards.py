"""The default reward of the shapes pack: exact match of the normalised answer (the shared ``vqa_exact``): a
fragment that half-matches every colour scores nothing, so the only way up is to read the colour from the image.
The pack has no reward of its own."""

REWARDS = [{"name": "vqa_exact", "weight": 1.0}]
