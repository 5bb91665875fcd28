# A profile you already have (docs/imports.md): a torch.profiler trace or an Nsight Compute CSV
# export, read and kept as a run of kind import, which the roofline step places on this machine's
# latest ceilings. Nothing is measured; the job runs again when the file changes.
rule import_profile:
    input:
        profile=import_file,
    output:
        receipt="results/imports/{name}/receipt.json",
    log:
        "logs/import_profile/{name}.log",
    conda:
        "../environment.yml"
    params:
        tool=import_tool,
    script:
        "../workflow_scripts/import_profile.py"
