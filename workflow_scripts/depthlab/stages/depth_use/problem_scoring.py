"""Scoring a model on problems of graded difficulty (the problem sets of depthlab.data.problem_sets):
greedy accuracy per (family, level) and the depth score tables of the skip interventions.

At evaluation a prompt is preceded by bos (= eos, the document boundary the model saw in
training); `evaluate_problems` decodes the answer greedily (one token per answer word) and
`problem_batches` builds teacher-forced batches whose measure_mask marks the answer positions:
the positions whose next-token prediction is an answer token (the last prompt token, then every
answer token but the last). A problem may carry `grade: boxed` (MATH): it is graded on the
model's own greedy solution instead (see depthlab.data.benchmark_problems). `depth_score_tables` runs
the per-problem output effect of skipping each layer (depthlab.stages.depth_use.interventions) and its depth
score per level (depthlab.stages.depth_use.depth_score).
"""

from __future__ import annotations

import numpy as np
import torch

from depthlab.core.errors import ProblemError
from depthlab.core.placement import input_device
from depthlab.data.benchmark_problems import MATH_STOP, boxed_answer, normalise_answer
from depthlab.data.problem_sets import ALL_FAMILIES, chance_accuracy


def _prompt_ids(tokenizer, problem: dict, prepend_bos: bool) -> tuple[list[int], list[int]]:
    prompt = tokenizer(problem["prompt"], add_special_tokens=False)["input_ids"]
    # the answer follows the prompt after a space, as in the training documents
    full = tokenizer(f"{problem['prompt']} {problem['answer']}", add_special_tokens=False)[
        "input_ids"
    ]
    if full[: len(prompt)] != prompt or len(full) == len(prompt):
        raise ProblemError(
            f"problem {problem['prompt']!r}: prompt and answer do not tokenise "
            f"into a prefix and a non-empty continuation"
        )
    answer = full[len(prompt) :]
    if prepend_bos:
        prompt = [tokenizer.bos_token_id] + prompt
    return prompt, answer


def _pad(sequences: list[list[int]], pad_id: int):
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    return ids, mask


def _greedy_tokens(
    model, sequences: list[list[int]], steps: int, pad_id: int, device
) -> list[list[int]]:
    """`steps` greedily generated tokens per row: right padding with explicit position ids, one
    full forward per token (no cache; any model whose forward takes input_ids, attention_mask
    and position_ids)."""
    from depthlab.stages.residual_stream import position_ids_from_mask

    sequences = [list(s) for s in sequences]
    generated = [[] for _ in sequences]
    for _ in range(steps):
        ids, mask = _pad(sequences, pad_id)
        ids, mask = ids.to(device), mask.to(device)
        logits = model(
            input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)
        ).logits
        last = mask.sum(dim=1) - 1
        next_ids = logits[torch.arange(len(sequences), device=device), last].argmax(-1).tolist()
        for row, token in enumerate(next_ids):
            sequences[row].append(token)
            generated[row].append(token)
    return generated


def _generate_texts(
    model, tokenizer, prompts: list[list[int]], max_new_tokens: int, stop: str, pad_id: int, device
) -> list[str]:
    """Greedy completions, decoded and cut at the first `stop`. A transformers model decodes
    with its KV cache (left padding, explicit position ids; done once every row has produced
    eos or `stop`); any other model through `_greedy_tokens`."""
    eos = tokenizer.eos_token_id
    if not hasattr(model, "generate"):
        tokens = _greedy_tokens(model, prompts, max_new_tokens, pad_id, device)
    else:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        tokens = [[] for _ in prompts]
        done = [False] * len(prompts)
        cache = None
        for _ in range(max_new_tokens):
            out = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                cache=cache,
                use_cache=True,
            )
            cache = out.cache
            next_ids = out.logits[:, -1].argmax(-1)
            for row, token in enumerate(next_ids.tolist()):
                if done[row]:
                    continue
                if token == eos:
                    done[row] = True
                    continue
                tokens[row].append(token)
                done[row] = stop in tokenizer.decode(tokens[row], skip_special_tokens=True)
            if all(done):
                break
            ids = next_ids[:, None]
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
            positions = positions[:, -1:] + 1
    return [tokenizer.decode(row, skip_special_tokens=True).split(stop)[0] for row in tokens]


def grade_boxed(completion: str, problem: dict) -> bool:
    """A MATH completion is right when its last \\boxed{} equals the reference's (normalised)."""
    answer = boxed_answer(completion)
    return answer is not None and normalise_answer(answer) == normalise_answer(
        problem["final_answer"]
    )


@torch.inference_mode()
def evaluate_problems(
    model,
    tokenizer,
    problems: list[dict],
    batch_size: int = 64,
    prepend_bos: bool = True,
    completions: list | None = None,
) -> np.ndarray:
    """Greedy answer accuracy per problem (bool array): the model generates len(answer) tokens
    after the prompt (right padding with explicit position ids, one forward per generated token:
    no cache, few answer tokens), all must equal the answer's. Problems with `grade: boxed`
    (MATH) are graded on the model's own greedy solution instead (`grade_boxed`, at most their
    max_new_tokens tokens); their decoded completions go into `completions` when given (a list,
    filled with None for the others)."""
    device = input_device(model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    correct = np.zeros(len(problems), dtype=bool)
    encoded = [_prompt_ids(tokenizer, p, prepend_bos) for p in problems]
    grades = [p.get("grade", "exact") for p in problems]
    unknown = sorted(set(map(str, grades)) - {"exact", "boxed"})
    if unknown:
        raise ProblemError(f"problems: unknown grade {', '.join(unknown)} (exact | boxed)")
    exact = [i for i, grade in enumerate(grades) if grade == "exact"]
    boxed = [i for i, grade in enumerate(grades) if grade == "boxed"]
    for start in range(0, len(exact), batch_size):
        rows = exact[start : start + batch_size]
        steps = max(len(encoded[i][1]) for i in rows)
        generated = _greedy_tokens(model, [encoded[i][0] for i in rows], steps, pad_id, device)
        for row, index in enumerate(rows):
            answer = encoded[index][1]
            correct[index] = generated[row][: len(answer)] == answer
    if completions is not None:
        completions[:] = [None] * len(problems)
    for start in range(0, len(boxed), batch_size):
        rows = boxed[start : start + batch_size]
        eos = tokenizer.eos_token_id
        texts = _generate_texts(
            model,
            tokenizer,
            [encoded[i][0] for i in rows],
            max(int(problems[i]["max_new_tokens"]) for i in rows),
            MATH_STOP,
            pad_id if tokenizer.pad_token_id is not None or eos is None else eos,
            device,
        )
        for index, text in zip(rows, texts):
            correct[index] = grade_boxed(text, problems[index])
            if completions is not None:
                completions[index] = text
    return correct


def accuracy_table(problems: list[dict], correct: np.ndarray):
    """Accuracy per (family, level) with its count and chance level: the problems' own `chance`
    where they carry one (natural-text families: it depends on the level), else the family's."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "family": [p["family"] for p in problems],
            "level": [p["level"] for p in problems],
            "correct": correct,
            "chance": [
                float(p["chance"])
                if "chance" in p
                else chance_accuracy(p["family"])
                if p["family"] in ALL_FAMILIES
                else np.nan
                for p in problems
            ],
        }
    )
    grouped = frame.groupby(["family", "level"], sort=True)
    table = grouped["correct"].agg(["mean", "size"])
    table = table.rename(columns={"mean": "accuracy", "size": "problems"}).reset_index()
    table["chance"] = grouped["chance"].first().to_numpy()
    return table


def problem_batches(
    tokenizer,
    problems: list[dict],
    batch_size: int,
    prepend_bos: bool = True,
    max_length: int | None = None,
):
    """Teacher-forced batches (prompt + answer, right padding) with measure_mask marking the
    answer positions and prompt_ids numbering the problems; for depthlab.stages.depth_use.interventions."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for start in range(0, len(problems), batch_size):
        sequences, answer_spans = [], []
        for problem in problems[start : start + batch_size]:
            prompt, answer = _prompt_ids(tokenizer, problem, prepend_bos)
            sequence = prompt + answer
            if max_length is not None and len(sequence) > max_length:
                raise ProblemError(
                    f"problem {problem['prompt'][:40]!r}...: {len(sequence)} "
                    f"tokens exceed max_length {max_length}"
                )
            sequences.append(sequence)
            answer_spans.append((len(prompt) - 1, len(sequence) - 1))
        ids, mask = _pad(sequences, pad_id)
        measure = torch.zeros_like(mask, dtype=torch.bool)
        for row, (first, end) in enumerate(answer_spans):
            measure[row, first:end] = True
        yield {
            "input_ids": ids,
            "attention_mask": mask,
            "measure_mask": measure,
            "prompt_ids": list(range(start, start + len(sequences))),
        }


def depth_score_tables(
    adapter,
    tokenizer,
    problems: list[dict],
    settings,
    variant: str,
    batch_size: int,
    max_length: int,
    prepend_bos: bool,
    bootstrap: dict,
    seed: int,
    log=None,
) -> dict:
    """Per-level accuracy, depth score with a bootstrap interval per (family, level), and the
    per-problem output effect of skipping each layer at the answer positions (Csordas et al.:
    depth score = sum_l l e_l / sum_l e_l). `settings` are the skip settings; only `variant`
    (an _all variant) is run. Returns {accuracy, depth_score, problem_effects} frames, and
    `completions` (the greedy solutions of boxed-graded problems) when there are any. `log`:
    where the skip pass's progress lines go (every ~10 s, with its ETA)."""
    import dataclasses

    import pandas as pd

    from depthlab.stages.depth_use.depth_score import depth_scores_by_group
    from depthlab.stages.depth_use.interventions import skip_effects

    prepend = prepend_bos and tokenizer.bos_token_id is not None
    completions = []
    correct = evaluate_problems(
        adapter.model,
        tokenizer,
        problems,
        batch_size=batch_size,
        prepend_bos=prepend,
        completions=completions,
    )
    batches = problem_batches(
        tokenizer, problems, batch_size, prepend_bos=prepend, max_length=max_length
    )
    if log is not None:
        from depthlab.core.tracking import ProgressLog, counted

        total = -(-len(problems) // batch_size)
        batches = counted(batches, ProgressLog("skip pass", total, log, unit="problem batches"))
    scored = skip_effects(
        adapter,
        batches,
        dataclasses.replace(settings, variants=(variant,)),
        per_prompt=True,
    )
    per_problem = scored.per_prompt_output[variant]
    families = np.array([p["family"] for p in problems])
    levels = np.array([p["level"] for p in problems])
    frames = []
    for family in sorted(set(families)):
        member = families == family
        frame = depth_scores_by_group(
            per_problem[member],
            levels[member],
            resamples=bootstrap["resamples"],
            confidence=bootstrap["confidence"],
            seed=seed,
        )
        frame.insert(0, "family", family)
        frames.append(frame.rename(columns={"group": "level", "prompts": "problems"}))
    layers = adapter.num_layers
    graded = [i for i, text in enumerate(completions) if text is not None]
    extra = (
        {
            "completions": pd.DataFrame(
                {  # the generated solutions a boxed grade read
                    "problem": graded,
                    "family": families[graded],
                    "level": levels[graded],
                    "correct": correct[graded],
                    "completion": [completions[i] for i in graded],
                }
            )
        }
        if graded
        else {}
    )
    return {
        "accuracy": accuracy_table(problems, correct),
        "depth_score": pd.concat(frames, ignore_index=True),
        "problem_effects": pd.DataFrame(
            {
                "problem": np.repeat(np.arange(len(problems)), layers),
                "family": np.repeat(families, layers),
                "level": np.repeat(levels, layers),
                "correct": np.repeat(correct, layers),
                "skipped": np.tile(np.arange(layers), len(problems)),
                "output_effect": per_problem.reshape(-1),
            }
        ),
        **extra,
    }
