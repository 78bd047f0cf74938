"""One small config.json per family the tool reads, from the per-family tests' own tables
(tests/hf_*examples.py, tests/test_hf_*.py), for the checks of LoRA targets against PEFT
(tests/test_lora_peft_targets.py, tests/lora_web_fuzz.py). Data only: importing it
imports those test modules, nothing of LoRA's."""
from __future__ import annotations


def families() -> dict:
    """(label, config.json object): one small config per family the suite already has."""
    from hf_examples import CONFIGS as DENSE
    from hf_moe_examples import CONFIGS as MOE
    from hf_h3_examples import CONFIGS as H3
    import test_hf_frontier_moe as FM
    import test_hf_nemotron_h_moe as NHM
    import test_hf_nemotron_h as NH
    import test_hf_granitemoehybrid as GR
    import test_hf_falcon_h1 as FH
    import test_hf_jamba as JA
    import test_hf_lfm2 as LF
    import test_hf_kimi_linear as KL
    import test_hf_qwen3_5 as Q35
    import test_hf_deepseek_v32 as V32
    out = {f"dense:{k}": v for k, v in DENSE.items()}
    out.update({f"moe:{k}": v for k, v in MOE.items() if k in ("mixtral", "qwen3_moe", "deepseek_v3")})
    out.update({f"h3:{k}": v for k, v in H3.items() if k in ("deepseek_v2", "gpt_oss")})
    out.update({f"frontier_moe:{k}": v for k, v in FM.CONFIGS.items()})
    out.update({"nemotron_h_moe": NHM.DATA, "nemotron_h": NH.DATA, "granitemoehybrid": GR.DATA,
                "falcon_h1": FH.DATA, "jamba": JA.DATA, "lfm2": LF.DATA, "kimi_linear": KL.DATA})
    out.update({f"qwen3_5:{k}": v for k, v in getattr(Q35, "CONFIGS", {}).items()})
    out.update({f"deepseek_v32:{k}": v for k, v in V32.CONFIGS.items()})
    import test_hf_gemma as GE
    import test_hf_gemma4 as GE4
    import test_hf_cohere as CO
    import test_hf_cohere2 as CO2
    import test_hf_frontier_dense as FD
    import test_hf_llama4 as L4
    import test_hf_parallel as PA
    import test_hf_phimoe as PM
    for prefix, table in (("gemma", GE.CONFIGS), ("cohere", CO.CONFIGS), ("cohere2", CO2.CONFIGS),
                          ("frontier_dense", FD.CONFIGS), ("parallel", PA.CONFIGS)):
        out.update({f"{prefix}:{k}": v for k, v in table.items()})
    out.update({"gemma4": GE4.DATA, "llama4:text": L4.CONFIGS["text"], "phimoe": PM.DATA})
    return out
