"""Our mapping of ParallelKernelBench's problems to this suite's tags, kept as data.

PKB files its problems by number and name only. Here each reference stem gets: a category of ours
(p2p collective ep fusion utility), the parallelism it exercises in PKB's taxonomy terms (tp sp cp
dp fsdp ep pp, or non_llm for its non-LLM workloads), and, where we know it, extra facts:
`cost` (a roofline model by
name, see COSTS; items without one report no roofline rather than a wrong one), `inplace` (forces
the in-place check either way; otherwise it is read from the reference's code), `large` (False:
no size above PKB's default, the generator's inputs grow too fast). A stem missing here (another
PKB version, a test fixture) gets DEFAULT: no tags beyond `pkb`. Where a reference runs on
CPU is not here but in eligibility.py (the census's evidence).
"""
from __future__ import annotations

DEFAULT = ("utility", ())

# stem: (category, parallelism tags[, facts])
TAXONOMY: dict[str, tuple] = {
    "1_allreduce": ("collective", ("dp",), {"cost": "all_reduce"}),
    "2_allgather": ("collective", ("tp", "fsdp"), {"cost": "all_gather"}),   # 3-D all_gather_into_tensor: not on gloo
    "3_broadcast": ("collective", ("dp",), {"cost": "broadcast"}),
    # non-root outputs of dist.reduce are the backend's scratch: not compared on gloo
    "4_reduce": ("collective", ("dp",), {"cost": "reduce"}),
    "5_scatter": ("collective", (), {"cost": "scatter"}),
    "6_gather": ("collective", (), {"cost": "gather"}),
    "7_reducescatter": ("collective", ("tp", "fsdp"), {"cost": "reduce_scatter"}),
    "8_alltoall": ("collective", ("ep", "sp"), {"cost": "all_to_all"}),
    "9_layernorm_backward": ("fusion", ("sp",)),
    "10_embedding_lookup": ("utility", ("tp",)),
    "11_allgather_gemm_AT": ("fusion", ("tp",)),
    "12_allgather_gemm": ("fusion", ("tp", "sp")),
    "13_gemm_allreduce": ("fusion", ("tp",)),
    "14_gemm_allgather": ("fusion", ("tp",)),
    "15_combined_sharded_gemms": ("fusion", ("tp",)),
    "16_gemm_reducescatter": ("fusion", ("tp", "sp")),
    "17_rope_allgather": ("fusion", ("sp",)),
    "18_tp_rms_norm": ("fusion", ("tp",)),
    "19_blocked_fp8_quantize": ("utility", ("fsdp",)),
    "20_blocked_fp8_dequantize": ("utility", ("fsdp",)),
    "21_clip_grad_norm_no_ep": ("utility", ("dp",)),
    "22_clip_grad_norm_ep": ("utility", ("dp", "ep")),
    "23_grad_acc_loss": ("utility", ("dp",)),
    "24_load_balancing_loss_fn": ("ep", ("ep",)),
    "25_importance_sampling_loss": ("utility", ("tp",)),
    "26_moe_token_preprocess": ("ep", ("ep",)),
    "27_moe_all2all_primitive": ("ep", ("ep",)),
    "28_moe_pre_all2all": ("ep", ("ep",), {"large": False}),    # a Python loop per token in the generator
    "29_moe_post_all2all": ("ep", ("ep",), {"large": False}),
    "30_moe_epgroupgemm_lora_backward": ("ep", ("ep",)),
    "31_fused_moe_fwd": ("ep", ("ep",)),
    "32_fused_moe_fwd_lora": ("ep", ("ep",)),
    "33_ulysses_all_to_all_tensor_primitive": ("collective", ("sp",)),
    "34_ulysses_all_gather_into_tensor_primitive": ("collective", ("sp",)),
    "35_ulysses_all_gather_variable_primitive": ("collective", ("sp",)),
    "36_ulysses_gather_seq_scatter_heads": ("collective", ("sp",)),
    "37_ulysses_gather_heads_scatter_seq": ("collective", ("sp",)),
    "38_ulysses_gather_seq_scatter_heads_qkv": ("collective", ("sp",)),
    "39_ulysses_attention_e2e": ("fusion", ("sp",)),
    "40_ddp": ("utility", ("dp",)),
    "41_zero1_optimizer_shard": ("utility", ("dp", "fsdp")),
    "42_zero2_optimizer_shard_grad": ("utility", ("dp", "fsdp")),
    "43_fused_adam_grad_unshard_allgather": ("fusion", ("fsdp",)),
    "44_quantized_grad_allreduce": ("utility", ("dp",)),
    "45_reducescatter_fused_rmsnorm": ("fusion", ("tp", "sp")),
    "46_fsdp_adamw_sharded": ("utility", ("fsdp",)),
    "46_gemv_decode": ("fusion", ("tp",)),
    "47_fsdp_step_e2e": ("utility", ("fsdp",)),
    "48_fsdp_and_tp": ("fusion", ("fsdp", "tp")),
    "49_moe_ep_balanced": ("ep", ("ep",)),
    "50_moe_ep_wide": ("ep", ("ep",)),
    "51_moe_ep_narrow": ("ep", ("ep", "dp")),
    "52_fp8_reduce_scatter_grads": ("utility", ("fsdp",)),
    "53_fp8_allgather_params": ("utility", ("fsdp",)),
    "54_ring_attention": ("p2p", ("cp",)),
    "55_ring_attention_tp": ("p2p", ("cp", "tp")),
    "56_ring_attention_pp": ("p2p", ("cp", "pp")),
    "57_ring_attention_backward_dp": ("p2p", ("cp", "dp")),
    "58_openclip_contrastive_loss": ("utility", ("dp", "non_llm")),
    "59_physicsnemo_distributed_rfft": ("collective", ("non_llm",), {"large": False}),   # (M/64, M, N) fp32
    "60_physicsnemo_distributed_irfft": ("collective", ("non_llm",)),
    "61_gsplat_3d_gaussian_splatting": ("utility", ("non_llm",)),
    "62_torchharmonics_spherical_convolution": ("utility", ("non_llm",)),
    "63_deepmd_kalman_filter_optimizer": ("utility", ("non_llm",)),
    "64_gnn_neighbor_sampling": ("utility", ("non_llm",)),
    "65_gnn_feature_exchange_all2all": ("collective", ("non_llm",)),
    "66_gnn_feature_exchange_all2all_backward": ("collective", ("non_llm",)),
    "67_gnn_sparse_embedding_all2all": ("collective", ("non_llm",)),
    "68_gnn_sparse_feature_fetch_projection": ("fusion", ("non_llm",)),
    "69_gnn_negative_scoring": ("utility", ("non_llm",)),
    "70_torchrec_kjt_all2all": ("collective", ("non_llm",)),
    "71_hyena_conv1d_boundary_exchange": ("p2p", ("cp",)),
    "72_hyena_forward_cp": ("p2p", ("cp",)),
    "73_vocab_parallel_cross_entropy_loss": ("utility", ("tp",)),
    "74_fla_kimi_delta_attention_cp_tp": ("fusion", ("cp", "tp")),
    "75_fla_gated_deltanet_cp": ("fusion", ("cp",)),
    "76_opensora_conv3d_allreduce": ("fusion", ("non_llm",)),
    "77_magi1_cso_async_attention": ("fusion", ("cp", "non_llm")),
    "78_magi1_tile_parallel_vae_decode": ("p2p", ("non_llm",)),
    "79_dinov2_distributed_knn": ("utility", ("non_llm",)),
    "80_dinov2_distributed_sinkhorn_knopp": ("utility", ("non_llm",)),
    "81_sam3_allgather_iou_suppression": ("utility", ("non_llm",)),
    "82_vocab_parallel_log_prob_topk": ("utility", ("tp",)),
    "83_vocab_parallel_log_prob_topk_chunked": ("utility", ("tp",)),
    "84_vocab_parallel_log_prob_topk_chunked_backward": ("utility", ("tp",)),
    "85_distributed_sample_sort": ("utility", ("non_llm",)),
    "86_tp_muon_orthogonalization": ("utility", ("tp",)),
    "87_conv2d_boundary_exchange": ("p2p", ("non_llm",)),
}
TAGS = ("tp", "sp", "cp", "dp", "fsdp", "ep", "pp", "non_llm")


def entry(stem: str) -> tuple[str, tuple, dict]:
    """(category, tags, facts) of a reference stem; DEFAULT for a stem we have not mapped."""
    category, tags, *rest = TAXONOMY.get(stem, DEFAULT)
    return category, tuple(tags), dict(rest[0]) if rest else {}


# Per-GPU lower bounds of PKB's primitives at base shape (M, N): `b` is the bytes of one (M, N)
# block, `n` its elements, `w` the world size. Shapes from PKB's generator: 1-4 and 6 take one
# block per rank, 5 a (W, M, N) stack on the root, 7 a (W*M, N) tensor, 8 a (W, M, N) tensor.
COSTS = {
    "all_reduce": lambda b, n, w: {"link_bytes": 2 * (w - 1) / w * b, "hbm_bytes": 2 * b, "flops": (w - 1) / w * n},
    "all_gather": lambda b, n, w: {"link_bytes": (w - 1) * b, "hbm_bytes": (w + 1) * b, "flops": 0},
    "broadcast": lambda b, n, w: {"link_bytes": b, "hbm_bytes": 2 * b, "flops": 0},
    "reduce": lambda b, n, w: {"link_bytes": b, "hbm_bytes": 2 * b, "flops": (w - 1) / w * n},
    "scatter": lambda b, n, w: {"link_bytes": (w - 1) * b, "hbm_bytes": (w + 1) * b, "flops": 0},
    "gather": lambda b, n, w: {"link_bytes": (w - 1) * b, "hbm_bytes": (w + 1) * b, "flops": 0},
    "reduce_scatter": lambda b, n, w: {"link_bytes": (w - 1) * b, "hbm_bytes": (w + 1) * b, "flops": (w - 1) * n},
    "all_to_all": lambda b, n, w: {"link_bytes": (w - 1) * b, "hbm_bytes": 2 * w * b, "flops": 0},
}
