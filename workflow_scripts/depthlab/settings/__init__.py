"""Each stage's settings, torch-free, one module per stage: what the stage accepts beyond the
schema's types (its names: the block-ranking criteria, the LM task kinds, the intervention kinds),
the checks the schema cannot make (one key against another, a grid against a model's depth), and
the defaults the code fills in, read from config/schema.yaml, the one place a default is written
(`defaults.py`).

    defaults        an optional key's default, read from config/schema.yaml
    block_criteria  the block-ranking criteria of pruning, declared once each
    pruning         the one rule for a block-size grid (`block_sizes`: null is every n) and
                    pruning's checks
    lm_tasks        the LM task set's kinds, names and checks (pruning and fine-tuning)
    depth_use       the skip interventions' kinds and the linear maps' checks
    scaling         a fit's settings: scaling.fit merged with its entry, checked
    toy             the toy model's temperature grid and checks

The resolver (depthlab.config, the job planner), the resource planner (depthlab.plan) and the
stages' engines read them from here. `training` is the settings family of every training run
(pretraining, fine-tuning, healing) and healing's checks.
"""
