# Scaling stage: the decomposed width/depth/data law (Liu et al. 2026) and the reference form
# (Hoffmann et al. 2022; Besiroglu et al. 2024) fitted on the project's own depth x width sweep
# and on CSV points (the Chinchilla models), with bootstrap intervals and held-out validation.

SCALING = config.get("scaling") or {}
SCALING_FITS = SCALING.get("fits") or {}
SCALING_SWEEP = SCALING.get("sweep")
SCALING_SWEEP_MODELS = [
    name for name, model in MODELS.items() if SCALING_SWEEP and model.get("sweep") == SCALING_SWEEP
]
for _fit_name, _fit in SCALING_FITS.items():
    if _fit["source"] == "sweep" and not SCALING_SWEEP_MODELS:
        raise WorkflowError(
            f"invalid config: scaling.fits.{_fit_name}.source: 'sweep' needs scaling.sweep to "
            f"name a declared sweep with models"
        )


# Each fit's points: the collected sweep CSV, or its CSV (as given if it exists from the run's
# working directory, else relative to the workflow folder).
SCALING_POINTS = {
    name: (
        f"{RESULTS}/scaling/sweep_points.csv"
        if fit["source"] == "sweep"
        else fit["source"]
        if Path(fit["source"]).is_absolute() or Path(fit["source"]).exists()
        else str(Path(workflow.basedir) / fit["source"])
    )
    for name, fit in SCALING_FITS.items()
}


if SCALING:

    rule collect_sweep:
        input:
            models=[model_dir(name) for name in SCALING_SWEEP_MODELS],
            script=script("collect_sweep.py"),
        output:
            points=f"{RESULTS}/scaling/sweep_points.csv",
        log:
            log_file("scaling", "collect_sweep"),
        benchmark:
            benchmark_file("scaling", "collect_sweep")
        conda:
            ENVIRONMENT
        threads: stage_threads("scaling")
        resources:
            **stage_resources("scaling"),
        shell:
            "python {input.script} --models {input.models} --out {output.points}"
            " > {log} 2>&1"


    rule fit_scaling:
        input:
            points=lambda wildcards: SCALING_POINTS[wildcards.fit],
            script=script("fit_scaling.py"),
        output:
            fit=f"{RESULTS}/scaling/{{fit}}/fit.json",
            samples=f"{RESULTS}/scaling/{{fit}}/bootstrap.csv",
        params:
            defaults=as_json(SCALING.get("fit") or {}),
            fit=lambda wildcards: as_json(SCALING_FITS[wildcards.fit]),
            seed=config["seed"],
        wildcard_constraints:
            fit=wildcard_alternatives(SCALING_FITS),
        log:
            log_file("scaling", "{fit}"),
        benchmark:
            benchmark_file("scaling", "{fit}")
        conda:
            ENVIRONMENT
        threads: stage_threads("scaling")
        resources:
            **stage_resources("scaling"),
        shell:
            "python {input.script} --points {input.points} --name {wildcards.fit}"
            " --defaults {params.defaults:q} --fit {params.fit:q} --seed {params.seed}"
            " --threads {threads} --out-json {output.fit} --out-samples {output.samples} > {log} 2>&1"


    rule plot_scaling:
        input:
            fit=rules.fit_scaling.output.fit,
            samples=rules.fit_scaling.output.samples,
            script=script("plot_scaling.py"),
        output:
            figure=report(f"{RESULTS}/figures/scaling/{{fit}}.{config['figures']['format']}",
                          category="Scaling laws", caption="captions/scaling.rst"),
        wildcard_constraints:
            fit=wildcard_alternatives(SCALING_FITS),
        log:
            log_file("scaling", "plot_{fit}"),
        benchmark:
            benchmark_file("scaling", "plot_{fit}")
        conda:
            ENVIRONMENT
        threads: stage_threads("figures")
        resources:
            **stage_resources("figures"),
        shell:
            "python {input.script} --fit {input.fit} --samples {input.samples}"
            " --out {output.figure} > {log} 2>&1"


    for _fit_name in SCALING_FITS:
        ALL_TARGETS.append(f"{RESULTS}/scaling/{_fit_name}/fit.json")
        ALL_TARGETS.append(f"{RESULTS}/figures/scaling/{_fit_name}.{config['figures']['format']}")
