"""Memory budgets of the stages' code that the resource plan sizes jobs by, in one place: the
engines (which run torch) import them from here, and so does depthlab.plan.resource_plan (torch-free,
read while the DAG is planned), so the plan cannot drift from the code it sizes."""

# (L+1) x tokens x vocab logits per logit-lens chunk: cache-sized on CPU, large on GPU
LOGIT_CHUNK_ELEMENTS = {"cpu": 1 << 21, "cuda": 1 << 28}
# Logits per chunk of positions: 2^25 float32 logits = 128 MiB (128 positions of a 262,144-word
# head, 680 of a 49k one); cross_entropy's log-softmax holds about as much again. Smaller chunks
# re-read the head's weights more often: on CPU 2^24 was ~20% slower than full logits, 2^25 ~5%.
LOSS_CHUNK_ELEMENTS = 1 << 25
# The pruning loss sweep's cache of layer inputs shared between removal sets (MiB)
SWEEP_CACHE_MIB = 512.0
# Choices per question of the offline lm-eval tasks
TASK_CHOICES = 4
