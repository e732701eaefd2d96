# Toy stage: teacher-student residual networks (Liu et al. 2026). One job per teacher kind and
# temperature trains every student depth; one job fits the depth exponents and plots them.

TOY = config.get("toy") or {}
# Keys that change what is trained (the fit's keys are excluded so refitting retrains nothing).
TOY_TRAIN_KEYS = (
    "width", "hidden", "input_size", "output_size", "teacher_layers", "student_depths",
    "temperatures", "steps", "batch_size", "lr", "eval_batches", "replicates", "angle_samples",
    "device",
)


TOY_TEMPERATURES = TOY.get("temperatures") or []
TOY_TEMPERATURE_COUNT = (
    TOY_TEMPERATURES["count"] if isinstance(TOY_TEMPERATURES, dict) else len(TOY_TEMPERATURES)
)


if TOY:

    rule train_toy:
        input:
            script=script("train_toy.py"),
        output:
            run=directory(f"{RESULTS}/toy/{{kind}}/T{{index}}"),
        params:
            toy=as_json({key: TOY[key] for key in TOY_TRAIN_KEYS if key in TOY}),
            seed=config["seed"],
        wildcard_constraints:
            kind="independent|tied",
            index=r"\d+",
        log:
            log_file("toy", "{kind}_T{index}"),
        benchmark:
            benchmark_file("toy", "{kind}_T{index}")
        conda:
            ENVIRONMENT
        threads: stage_threads("toy")
        resources:
            **stage_resources("toy"),
        shell:
            "python {input.script} --teacher-kind {wildcards.kind}"
            " --temperature-index {wildcards.index} --toy-config {params.toy:q}"
            " --seed {params.seed} --threads {threads} --out {output.run} > {log} 2>&1"


    rule fit_toy:
        input:
            runs=expand(
                f"{RESULTS}/toy/{{kind}}/T{{index}}",
                kind=TOY["teacher_kinds"],
                index=range(TOY_TEMPERATURE_COUNT),
            ),
            script=script("fit_toy.py"),
        output:
            fit=f"{RESULTS}/toy/fit.json",
            figure=report(f"{RESULTS}/figures/toy_loss_vs_depth.{config['figures']['format']}",
                          category="Scaling laws", caption="captions/toy.rst"),
        params:
            form=TOY["fit_form"],
            bounds=" ".join(str(b) for b in TOY.get("exponent_bounds", [0.0, 10.0])),
        log:
            log_file("toy", "fit_toy"),
        benchmark:
            benchmark_file("toy", "fit_toy")
        # a CPU fit: the toy stage's resources without its GPU
        conda:
            ENVIRONMENT
        threads: stage_threads("toy")
        resources:
            **{k: v for k, v in stage_resources("toy").items() if k not in ("gpu", "gpu_model")},
        shell:
            "python {input.script} --runs {input.runs} --form {params.form}"
            " --exponent-bounds {params.bounds} --out-json {output.fit}"
            " --figure {output.figure} > {log} 2>&1"

    ALL_TARGETS.extend([rules.fit_toy.output.fit, rules.fit_toy.output.figure])
