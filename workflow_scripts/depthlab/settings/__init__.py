"""Each stage's settings, torch-free: the names a stage accepts (its block-ranking criteria, its
intervention kinds), the checks the schema cannot make (one key against another, a grid against a
model's depth) and the defaults the code needs, read from config/schema.yaml, the one place a
default is written (`defaults.py`). The resolver (depthlab.config), the resource planner
(depthlab.plan) and the stages' engines all read them from here; `pruning.grid` is the one rule
for a block-size grid (null: every n). Healing's settings live in depthlab.plan.stage_settings
until they join the training-settings family."""
