"""Supervised fine-tuning (Curse of Depth Sec. 5): data, training, evaluation scores, the job and its figures."""
