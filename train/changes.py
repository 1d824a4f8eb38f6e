"""Every change to a bar, a floor, a claim or a budget made after results were seen, with when, why and the verdicts
it moved (train/protocol.py re-exports it; every report prints it). The rules are otherwise as fixed before any result
beyond the training size was looked at."""
from __future__ import annotations

# Every change to a bar, a floor, a claim or a budget made after results were seen, with when and why (the report
# prints them). The rules are otherwise as fixed before any result beyond the training size was looked at.
CHANGES_AFTER_RESULTS = [
    "coord tasks: the bar was \"the best kind's error under one pixel\", which is Liu et al.'s claim itself; it became "
    "\"below the mean predictor\" after the 600-step in-distribution probes, before any coord cell of the runs",
    "coord/quadrant: the bar is judged on the training quadrants (validation split, floors there too) instead of the "
    "held-out quadrant, after a review of the first standard run (the held-out quadrant is the claim, not "
    "competence); the two floor cells were recomputed, the trained cells kept",
    "quick: text/copy from 600 to 1,000 steps after the first quick run left its best kind at 0.934 exact match in "
    "distribution (no size beyond training entered the choice)",
    "video/trajectory-long (2026-11-27): the record's first search cells showed NoPE at 1.0 in distribution (a "
    "first-half clip told the direction by where the disk was), so clips became random windows of the motion; rope "
    "then stayed at chance at 16-px frames and 600 steps, so frames became 32 px and steps 1,200 (from a probe); only "
    "the training size was looked at, and that run was discarded before any test size",
    "image/mnist-pair (2026-11-27, after its record was complete): 7-px patches on a 70-px strip (tested at 105 and "
    "140: x1.5, x2 as before) instead of 4-px patches on a 64-px one, for the standard record's 10-hour budget (its "
    "cells took 150-330 s, about a quarter of the record) and to tokenize the digits as image/mnist-zoom does; the "
    "bar (0.9), floors, steps and kinds unchanged; decided from an in-distribution probe on an unreported seed "
    "(probes/mnist_pair_7px.jsonl). Verdicts it moved (listed 2026-11-29), the 64-px rows (kept in "
    "standard-breadth) against the 70-px ones (standard), both judged by today's rules: Heo et al. on "
    "image/mnist-pair disagrees -> underpowered, Heo et al. centred not tested -> agrees in part; Yu et al. (not "
    "tested), Ostmeier et al. (inconclusive) and Schenck et al. (not tested) unchanged",
    "quick (2026-11-27): 2 runs (one per data seed) instead of 3 and video/trajectory at 300 steps instead of 600, "
    "for its 10-minute budget; the steps from an in-distribution probe on unreported seeds "
    "(probes/video_quick_steps.jsonl)",
    "standard (2026-11-28, after its record was complete): for the 10-hour budget, only the kinds a judged claim "
    "compares run, with NoPE as the control (the @index / @centered kinds of no claim on the zoom tasks, copy's "
    "later 1D kinds, xpos, cpb and rope+nope3 on the LM, learned, sinusoidal and rope@centered on trajectory-long "
    "left; their rows are in benchmarks/results/standard-breadth), and the kinds no claim compares keep 5 of their "
    "10 runs (other_runs), one per data seed; the LM's first grid is 0.004-0.016 instead of 0.001-0.004 (every LM "
    "kind's search had chosen 0.008 or 0.016 on validation at the training context, so the choices stay as they "
    "were); priced from the record's cell times (benchmarks/record_cost.py), knowing which bar judgments 5 runs "
    "change (benchmarks/README.md). Verdicts it moved: three kinds stop counting (learned on audio/tones, rope and "
    "rope@centered on video/trajectory fall under their bars at 5 runs); their 10-run rows stay in standard-breadth",
    "text/stdlib_lm, relative (listed 2026-11-28, made earlier after LM results were seen): T5's buckets at "
    "max_distance = the training context and 32 buckets (T5_IN_CONTEXT) instead of the default max_distance 128, "
    "which left the buckets of most 2-8x offsets untrained; it moved T5's perplexity at 8x from 20.6 to 4.25 and "
    "the Press et al. claim's relative half",
    "claims (listed 2026-11-28, made earlier after results were seen): the `keeps` halves (a kind said to keep its "
    "quality must keep its retention above 0 at the largest size) were added to the Press, Li (FIRE), Lin, "
    "Gopalakrishnan and video claims; it moved Li et al. (FIRE) from agrees to disagrees",
    "text/addition, coupling (listed 2026-11-28, made after its first runs were seen): max_position at twice the "
    "largest test length in digits plus 2, the reference's rule (COUPLING_MAX), instead of the sequence length plus "
    "2; text/addition is in no committed record's claims, so no verdict moved",
    "standard-v3 (2026-11-28, after the standard record was reviewed; no result beyond the training size of the new "
    "record seen): the search trains each candidate on 3 unreported runs (model seeds 1000-1002, data seeds 10-12) "
    "and chooses by their median, ties of the metric broken by the lower median validation loss instead of the lower "
    "rate (one search seed had ranked RoPE's rates on video by 3 items of 512); 10 data seeds, one per run, instead "
    "of 5 shared by two runs each; the LM's data seeds cut the corpus at distinct offsets (seeds 0 and 4 were the "
    "same data); every cell records its validation curve (10 evaluations) and a task whose median kind's search "
    "curve still rises after 80 % of its steps is not run until its steps are raised (train/curves.py)",
    "claims (2026-11-28, after a review of the standard record): a claim about behaviour beyond the training size is "
    "judged on each run's worsening from the training size (Kazemnejad, Heo, ComRoPE and the video claims were judged "
    "on the metric at the largest size; it stays as a secondary line), on the runs that pass the bar at the training "
    "size, paired on the runs two kinds share; bimodal runs are judged on success rates (Fisher exact) instead of rank "
    "tests; each half states its detectable effect beside the paper's and reads `underpowered` where it cannot see "
    "it; Heo et al.'s absolute baseline is the interpolated learned table (the paper's APE) instead of sinusoidal. "
    "Verdicts it moved on the standard record: VRoPE on video/trajectory-long inconclusive -> agrees (the runs where "
    "RoPE missed the bar at 8 frames left out) and its accuracy-at-16-frames claim (agrees) became the secondary line; "
    "VideoRoPE's two claims (both inconclusive) became one (inconclusive); Heo et al. (index) on image/digits-zoom "
    "inconclusive -> disagrees (the learned table worsens least); Heo et al. (centred) on image/mnist-pair "
    "inconclusive -> agrees in part; with the papers' effects (train/papers.py) four inconclusive verdicts read "
    "underpowered (ComRoPE on image/digits-zoom, Heo et al. on image/shapes-zoom and image/mnist-pair, Heo et al. "
    "centred on image/shapes-zoom)",
    "image/mnist-zoom (2026-11-28, after a review of the standard record): its claims are not tested (its NoPE "
    "reaches 0.895 at 28 px, so position adds at most ~6 points, and its 0.95 bar rested on one probe run) and "
    "standard-v3 leaves the task; verdicts it moved: Heo et al. (index and centred), ComRoPE, LieRE and STRING on "
    "image/mnist-zoom -> not tested",
    "text/stdlib_lm (2026-11-28, after a review): FIRE's and PoPE's keeps halves are not tested at a 64-character "
    "context (FIRE's normalizer compresses 1.99x from 64 to 512, the paper's 1.26x; PoPE at head_dim 16 has 5 of 16 "
    "frequencies cycling within 64 positions); their comparative halves stay, and both claims are judged whole on a "
    "new scale-matched task, text/stdlib_lm-256 (context 256 to 2,048, head_dim 32), not yet run",
    "text/stdlib_lm, FIRE and PoPE (2026-11-29, after the standard-v3 record was complete): their keeps halves, not "
    "tested at 64 characters, are named as dropped (Claim.keeps_untested) instead of left out of the claim, so a "
    "claim whose comparative halves agree reads `agrees in part`, not `agrees`; the dropped halves join no Holm "
    "family, so no effect, p or detectable effect changed. Verdicts it moved: Li et al. (FIRE) and Gopalakrishnan et "
    "al. (PoPE) on text/stdlib_lm agrees -> agrees in part, in standard-v3, standard and standard-breadth alike",
    "image/shapes-zoom and image/digits-zoom (2026-11-28, after a review: without scale augmentation NoPE itself "
    "collapsed under zoom, digits 0.73 -> 0.34): training images pass through random resized crops of 1/4 to all of "
    "the image (content 1-2x larger, DeiT-III's and RoPE-ViT's augmentation), from standard-v3 on; the standard "
    "record's rows were trained without it and stay as they are",
    "plateau rule, coordinate error (2026-11-28, after the coord tasks' search curves at the training size were "
    "seen, before any of their reported runs): the tolerance is 1 % of the mean predictor's error (the metric's "
    "span from chance to perfect, as 0.01 is accuracy's) instead of 1 % of the error itself, which held back a curve "
    "falling geometrically far under the one-pixel scale (the median kind at the chosen rates 0.0050 -> 0.0046 "
    "over the last 20 % of coord/uniform's 600 steps, 0.0081 -> 0.0066 on coord/quadrant); it lets both coord tasks "
    "train their runs at 600 steps (the median kind stopped improving by the new tolerance at step 240 on "
    "coord/uniform and 420 on coord/quadrant); no verdict moved (none "
    "existed)",
    "standard-v3 (2026-11-28): audio/tones and video/trajectory-long at 2,400 steps instead of 1,200, the plateau "
    "rule's own remedy (their median kinds at the chosen rates still rose after step 960 of 1,200: 0.950 -> 0.962 and "
    "0.930 -> 0.987 validation accuracy); the 1,200-step searches are kept in the record's superseded/ folder; no verdict moved",
    "standard-v3 (2026-11-28): image/digits-zoom at 1,200 steps instead of 600, the plateau rule's own remedy (trained "
    "on random resized crops, its median kind at the chosen rates still rose after step 480 of 600: 0.850 -> 0.872 "
    "validation accuracy); the 600-step search is kept in the record's superseded/ folder; no verdict moved",
    "standard-v3 (2026-11-29): image/mnist-pair at 4,800 steps instead of 2,400, the plateau rule's own remedy (its "
    "median kind at the chosen rates still rose after step 1,920 of 2,400: 0.912 -> 0.926 validation accuracy); the "
    "2,400-step search is kept in the record's superseded/ folder; no verdict moved",
    "standard-v3 (2026-11-29): text/stdlib_lm at 3,000 steps instead of 1,500, the plateau rule's own remedy (its "
    "median kind at the chosen rates still fell after step 1,200 of 1,500: 4.42 -> 4.35 -> 4.32 validation "
    "perplexity); the 1,500-step search is kept in the record's superseded/ folder; no verdict moved",
    "plateau rule (2026-11-29, after text/stdlib_lm's 1,500-step search curves and two probes at the training context "
    "on unreported seeds, before any search at a doubled LM budget and before image/mnist-pair's 4,800-step curves "
    "were looked at): a short budget is doubled once; a task still short at twice its first budget trains its runs "
    "there, marked in the report (the preset's final_budgets), instead of doubling again. The probes (FIRE on the "
    "64-character LM at 3,000 steps: 3.97 -> 3.93 -> 3.91 over its last fifth; on the 256-character LM at 1,500 "
    "steps: 3.83 -> 3.76 -> 3.75) show a perplexity still falling 1-2 % over the last fifth of any budget this "
    "machine affords, and a second doubling of the two LMs would add about 20 hours of CPU; no verdict moved (none "
    "existed)",
]
