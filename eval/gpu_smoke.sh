#!/usr/bin/env bash
# GPU smoke test of the evaluation with a real policy: `eval infer` (vLLM) -> `eval resolve` -> `eval score`.
#
# It documents the real run, on the demo's 4-question sample document so it takes minutes, not hours:
#   * vLLM offline generation (`LLM.chat`), greedy, 1,536 output tokens (THINKING=1: 4,096),
#     every page as a JPEG at min(1e6, budget / pages) pixels, prompts from recipes/prompts/;
#   * an optional LoRA adapter (EasyR1's global_step_N/actor/lora_adapter) through vLLM's LoRARequest;
#   * both interfaces, the snap control on the coordinate run, the budget-matched q / q+a controls on the
#     language run, and a resume check (a second `eval infer` must generate nothing);
#   * RIVALS=1: the two rivals on the same stack as well, in the same side-by-side table: LAT's Chain-of-Evidence
#     interface (vLLM, `--interface lat`, LAT's metrics in `eval score`) and MultAttnAttrib's attention interface
#     (transformers prefill, `--interface attention`: head identification by causal mediation, threshold
#     calibration, attribution; see eval/gpu_attention.md), whose wall time and peak GPU memory (nvidia-smi,
#     sampled every 0.5 s) go to $OUT/attention_cost.txt. The smoke uses the demo gold as its own probe set; a
#     real run takes probes disjoint from the test questions. The attention run reads the base MODEL (a LoRA
#     policy must be merged into a checkpoint first).
#
# Needs: a CUDA GPU and the server venv of the set-up step (vLLM 0.32.0 + this project: `python -m launch.setup
# setup --only server`; the first line printed names the python that runs and its vLLM; PY=... runs another), the
# model weights reachable by vLLM (a local folder, or the set-up's HF_HOME: `python -m launch.setup fetch-models`).
# `pip install -e ".[gpu]"` is not the way: its vLLM pins a torch other than the project's. For the full paper run replace GOLD/CACHE by the CiteVQA gold (`python -m data_prep
# citevqa`) and its cache (`python -m data_prep blocks`), and add JUDGE_URL/JUDGE_MODEL for the judge metrics.
# CITEVQA_DIR (a checkout of opendatalab/CiteVQA) gives the paper's prompts: CiteVQA's inference prompt for the
# coordinate run and CiteVQA's two-call judge; without it the coordinate run uses our prompt
# (--coordinate-prompt ours) and a JUDGE_URL judge the reward's rubric call (--judge-protocol rubric).
#
# Usage: MODEL=/models/Qwen3-VL-8B-Instruct [LORA=ckpt/global_step_144/actor/lora_adapter] [THINKING=1] \
#        [CITEVQA_DIR=CiteVQA/] [JUDGE_URL=http://127.0.0.1:8000/v1 JUDGE_MODEL=judge] [RIVALS=1] \
#        bash eval/gpu_smoke.sh [OUT]
set -euo pipefail

MODEL=${MODEL:?set MODEL to the base model folder or name}
LORA=${LORA:-}
OUT=${1:-gpu_smoke_out}
REPO=$(cd "$(dirname "$0")/.." && pwd)
# The server venv and the HF_HOME of the set-up step, as launch/setup.py names them.
setup_py=$REPO/.venv/bin/python
[[ -x $setup_py ]] || setup_py=python3
setup_vars=$(PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$setup_py" -m launch.setup shell) ||
  { echo "error: \`python -m launch.setup shell\` failed (above)" >&2; exit 1; }
eval "$setup_vars"
if [[ -z ${PY:-} ]]; then
  PY=$QC_SERVER_PY
  [[ -f $QC_SERVER_ENV/$QC_ENV_STAMP && -x $PY ]] ||
    { echo "error: the server venv $QC_SERVER_ENV is not built; run: python -m launch.setup setup --only server (or set PY)" >&2; exit 1; }
fi
vllm_version=$("$PY" -c 'from importlib.metadata import version; print(version("vllm"))' 2>/dev/null) ||
  { echo "error: $PY has no vllm; run: python -m launch.setup setup --only server (or set PY to a python with vLLM)" >&2; exit 1; }
echo "gpu smoke: python $(command -v "$PY" || echo "$PY") (vLLM $vllm_version), HF_HOME ${QC_HF_HOME}"
export HF_HOME=$QC_HF_HOME HF_HUB_CACHE=$QC_HF_HOME/hub
GOLD=${GOLD:-$OUT/demo/eval/gold.jsonl}
CACHE=${CACHE:-$OUT/demo/cache}

infer_flags=(--model "$MODEL" --gold "$GOLD" --cache-dir "$CACHE")
[[ -n "$LORA" ]] && infer_flags+=(--lora "$LORA")
[[ "${THINKING:-0}" == 1 ]] && infer_flags+=(--thinking)
if [[ -n "${CITEVQA_DIR:-}" ]]; then
  infer_flags+=(--citevqa-dir "$CITEVQA_DIR")
  protocol_flags=(--judge-protocol citevqa --citevqa-dir "$CITEVQA_DIR")
else
  infer_flags+=(--coordinate-prompt ours)
  protocol_flags=(--judge-protocol rubric)
fi
judge_flags=(--judge lexical)
[[ -n "${JUDGE_URL:-}" ]] && judge_flags=(--judge-url "$JUDGE_URL" --judge-model "${JUDGE_MODEL:?set JUDGE_MODEL}"
                                          "${protocol_flags[@]}")

# 1. The sample document, its cache (pdftext + minilm) and the demo gold (CPU).
if [[ ! -f "$GOLD" ]]; then
  "$PY" -m quotecite demo --out "$OUT/demo"
fi

interfaces=(language coordinate)
[[ "${RIVALS:-0}" == 1 ]] && interfaces+=(lat)
for interface in "${interfaces[@]}"; do
  pred="$OUT/pred_${interface}_raw.jsonl"
  # 2. Generation (GPU). Resumable: a rerun skips the questions already in $pred.
  "$PY" -m eval infer "${infer_flags[@]}" --interface "$interface" --out "$pred"
  # The resume check: nothing left to generate.
  "$PY" -m eval infer "${infer_flags[@]}" --interface "$interface" --out "$pred" | tee "$OUT/resume_$interface.log"
  grep -q "^0 generated" "$OUT/resume_$interface.log"
done

# 3. Resolve: quotes (the language interface), its budget-matched controls, coordinates raw and snapped.
"$PY" -m eval resolve --pred "$OUT/pred_language_raw.jsonl" --gold "$GOLD" --cache-dir "$CACHE" --out "$OUT/pred_language.jsonl"
for q in question question+answer; do
  "$PY" -m eval resolve --pred "$OUT/pred_language_raw.jsonl" --gold "$GOLD" --cache-dir "$CACHE" --query "$q" \
    --out "$OUT/pred_language_${q/+/_}.jsonl"
done
"$PY" -m eval resolve --pred "$OUT/pred_coordinate_raw.jsonl" --gold "$GOLD" --cache-dir "$CACHE" --out "$OUT/pred_coordinate.jsonl"
"$PY" -m eval resolve --pred "$OUT/pred_coordinate_raw.jsonl" --gold "$GOLD" --cache-dir "$CACHE" --snap \
  --out "$OUT/pred_coordinate_snap.jsonl"

conds=(language language_question language_question_answer coordinate coordinate_snap)
if [[ "${RIVALS:-0}" == 1 ]]; then
  # LAT: every box of the chain becomes a citation in points (eval/lat.py).
  "$PY" -m eval resolve --pred "$OUT/pred_lat_raw.jsonl" --gold "$GOLD" --cache-dir "$CACHE" --out "$OUT/pred_lat.jsonl"
  # MultAttnAttrib: calibrate (heads + threshold, written to heads_cma.json) and attribute, timed and with the GPU
  # memory sampled; then a second run reuses the saved head set and must attribute nothing new (resume).
  attention_flags=(--interface attention --model "$MODEL" --gold "$GOLD" --cache-dir "$CACHE"
                   --heads "$OUT/heads_cma.json" --out "$OUT/pred_attention_raw.jsonl")
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/attention_gpu_mem.csv" &
  smi=$!
  t0=$(date +%s)
  "$PY" -m eval infer "${attention_flags[@]}" --probes "$GOLD" --head-method cma --top-k 20
  t1=$(date +%s)
  kill "$smi" || true
  peak=$(sort -n "$OUT/attention_gpu_mem.csv" | tail -1)
  echo "attention interface: $((t1 - t0)) s wall (load + calibration + attribution of $(wc -l < "$GOLD") questions)," \
       "peak GPU memory ${peak} MiB (whole GPU, nvidia-smi)" | tee "$OUT/attention_cost.txt"
  "$PY" -m eval infer "${attention_flags[@]}" | tee "$OUT/resume_attention.log"
  grep -q "^0 attributed" "$OUT/resume_attention.log"
  "$PY" -m eval resolve --pred "$OUT/pred_attention_raw.jsonl" --gold "$GOLD" --cache-dir "$CACHE" \
    --out "$OUT/pred_attention.jsonl"
  conds+=(lat attention)
fi

# 4. Score every condition, then put them side by side and test language against coordinates.
runs=()
for cond in "${conds[@]}"; do
  "$PY" -m eval score --gold "$GOLD" --pred "$OUT/pred_$cond.jsonl" --cache-dir "$CACHE" "${judge_flags[@]}" \
    --label "$cond" --out "$OUT/score_$cond"
  runs+=("$OUT/score_$cond")
done
"$PY" -m eval report --runs "${runs[@]}" --out "$OUT/side_by_side"
"$PY" -m eval compare "$OUT/score_coordinate" "$OUT/score_language"
echo "gpu smoke: done; see $OUT/side_by_side/tables.md and $OUT/score_language/report.html"
