"""The GRPO and SFT loops on accelerate, with checkpoint/resume and logging."""
