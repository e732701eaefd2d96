"""One subpackage per stage: its engines, its job (`run(spec)`) and its figures; model_job and train_loop are shared by several stages."""
