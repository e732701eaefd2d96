# Claims: one table of every claim of the four papers this run can test, read from the stages'
# outputs (depthlab.claims); into the report under "Claims".


rule make_claims:
    input:
        folders=lambda wildcards: RESOLVED.inputs_for("make_claims", wildcards)["folders"],
        files=lambda wildcards: RESOLVED.inputs_for("make_claims", wildcards)["files"],
    output:
        table=PATHS.claims("csv"),
        markdown=report(PATHS.claims("md"), category="Claims", caption="captions/claims.rst"),
    params:
        script=script("make_claims.py"),
        code=code_version("make_claims.py"),
        spec=job_spec("make_claims"),
    localrule: True
    log:
        log_file("make_claims", "claims"),
    benchmark:
        benchmark_file("make_claims", "claims")
    conda:
        ENVIRONMENT
    threads: stage_threads("fits")
    resources:
        **stage_resources("fits", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
