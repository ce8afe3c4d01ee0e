"""`mmreason plan`: a run's per-GPU memory from the model's sizes and the recipe, before anything is launched."""
