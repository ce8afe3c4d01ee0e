"""Several processes: decisions they take together (``agree``) and FSDP2 sharding with parameters gathered
for generation (``sharding``). Used by the trainer and the in-training eval; imports no other room."""
