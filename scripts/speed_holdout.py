#!/usr/bin/env python3
"""The speed model's held-out check (issue 53, "Done when").

For every published single-GPU ResNet-50 (224x224, 1000 classes) training figure in the figures
file (scripts/speed_holdout.json: none of them in the calibration set), runs

    train memory --config <224 config> --card CARD --card-only --settings S --batch-size B
                 --output-dir DIR

with S = fp32 | fp16, plus +channels_last where the source ran NHWC, and reads the setting's
`predicted_images_per_second` (or `predicted_step_seconds`), `speed_model` and `largest_batch`
from DIR/memory_breakdown.json. It prints, as markdown:

  - one row per figure: card, setting, batch, published, predicted, error, largest batch, fits;
  - (a) absolute errors: the median |error| of the fp32/TF32 figures (and of the fp16 ones);
  - (b) ratio errors: every pair of different cards one source measured at the same setting (at
    that source's own batch for each card): predicted ratio against published ratio, median and
    largest |error|, with and without the pairs whose two cards share one data sheet;
  - the fit-free check: the predicted largest batch at 224 against the batch each figure ran at.

Figures flagged `overlaps_calibration` (an earlier run of the calibration benchmark itself) are
shown but kept out of the summaries (also given with them, on a line of their own).

It reports; it does not judge: the exit status is 0 whenever the table could be made, 1 when a
`train` run failed or its output could not be read (those rows say why), 2 for bad arguments, one
line before anything runs or is written: an empty value (`--only ''`, `--out ''`), a --figures
that is a folder or missing, a bad figure, a figure's card that `train cards` does not know (with
or without --only). Ctrl-C or SIGTERM: every `train` run under way is killed, exit 130.

    python3 scripts/speed_holdout.py [--train build/train] [--figures scripts/speed_holdout.json]
                                     [--out DIR] [--jobs N] [--reuse] [--only CARD,...]
                                     [--precision fp32|fp16]

--precision keeps the figures at that precision (each run's folder is named as without it, so
--reuse reads back a full run's). --only keeps the figures on those cards; both its names and the figures' are found by
`train cards --json --card NAME` (script_support.train_cards), as every --card finds a card. The
figures' cards are found so too, before any run, whenever there is a train to ask (always, but
with --reuse and no train).
"""

import concurrent.futures
import itertools
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

import script_support

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIG_224 = """\
# written by speed_holdout.py: ResNet-50 as the published ImageNet figures train it (torchvision's
# stem, 224x224, 1000 classes); synthetic data, so nothing is read; the card prediction records
# the step on this machine's CPU at batches 2-4.
model:
  arch: resnet50
  stem: imagenet
  num_classes: 1000
data:
  source: synthetic
  synthetic_train_size: 64
  synthetic_test_size: 16
  image_size: 224
training:
  device: cpu
  threads: 1
"""

MARKER = ".speed_holdout"  # marks a runs folder as this script's own scratch space


def setting_label(fig):
    label = fig["precision"]
    if fig.get("channels_last"):
        label += "+channels_last"
    return label


def run_name(index, fig):
    card = re.sub(r"[^A-Za-z0-9-]", "_", fig["card"])
    setting = setting_label(fig).replace("+", "_")
    return "%02d-%s-%s-b%d" % (index, card, setting, fig["batch"])


def find_key(obj, key):
    """The first value stored under `key` anywhere in obj (dicts and lists, depth first)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for value in obj.values():
            found = find_key(value, key)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for value in obj:
            found = find_key(value, key)
            if found is not None:
                return found
    return None


def read_prediction(path, fig):
    """What memory_breakdown.json predicts for this figure's setting: a dict, or raises."""
    with open(path) as f:
        study = json.load(f)
    settings = study.get("settings")
    if not isinstance(settings, list) or not settings:
        raise ValueError("no settings in %s" % path)
    wanted = setting_label(fig)
    chosen = None
    for s in settings:
        if s.get("setting") == wanted:
            chosen = s
            break
    if chosen is None:
        for s in settings:  # the label may be spelled differently: match on its parts
            fmt = "channels_last" if fig.get("channels_last") else "contiguous"
            if s.get("precision") == fig["precision"] and s.get("memory_format", fmt) == fmt \
                    and not s.get("checkpointing"):
                chosen = s
                break
    if chosen is None:
        raise ValueError("no setting %s in %s (has %s)" % (
            wanted, path, ", ".join(str(s.get("setting")) for s in settings)))
    if "card_prediction_error" in chosen:
        raise ValueError("card_prediction_error: %s" % chosen["card_prediction_error"])
    batch = chosen.get("batch_size", study.get("batch_size", fig["batch"]))
    ips = find_key(chosen, "predicted_images_per_second")
    step = find_key(chosen, "predicted_step_seconds")
    if ips is None and isinstance(step, (int, float)) and step > 0:
        ips = batch / step
    model = find_key(chosen, "speed_model")
    if isinstance(model, dict):
        model = model.get("name") or model.get("model") or json.dumps(model, sort_keys=True)
    card = chosen.get("card") or {}
    sheet = card.get("data_sheet") if isinstance(card, dict) else None
    return {
        "setting": chosen.get("setting"),
        "batch_size": batch,
        "predicted_images_per_second": ips,
        "predicted_step_seconds": step,
        "speed_model": model,
        "largest_batch": chosen.get("largest_batch"),
        "fits": chosen.get("fits"),
        "speed_bound": chosen.get("speed_bound"),
        "speed_not_estimated": chosen.get("speed_not_estimated"),
        "card_name": card.get("name") if isinstance(card, dict) else None,
        "data_sheet": sheet,
    }


def run_one(runs, train, config, runs_dir, index, fig, reuse, timeout):
    name = run_name(index, fig)
    out = os.path.join(runs_dir, name)
    result = {"index": index, "run_dir": out}
    breakdown = os.path.join(out, "memory_breakdown.json")
    if not (reuse and os.path.isfile(breakdown)):
        if os.path.exists(out):
            shutil.rmtree(out)  # this script's own scratch folder (runs_dir holds its marker)
        cmd = [train, "memory", "--config", config, "--card", fig["card"], "--card-only",
               "--settings", setting_label(fig), "--batch-size", str(fig["batch"]),
               "--output-dir", out]
        result["command"] = " ".join(cmd)
        started = time.time()
        try:
            proc = runs.run(cmd, timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            result["error"] = "train did not run: %s" % e
            return result
        if proc is None:
            result["error"] = "stopped"
            return result
        result["seconds"] = round(time.time() - started, 1)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out + ".log", "w") as f:
            f.write(proc.stdout)
        if proc.returncode != 0:
            tail = [l for l in proc.stdout.strip().splitlines() if l.strip()][-1:]
            result["error"] = "train exited %d: %s" % (proc.returncode, tail[0] if tail else "")
            return result
    try:
        result.update(read_prediction(breakdown, fig))
    except (OSError, ValueError, KeyError, TypeError) as e:
        result["error"] = "cannot read %s: %s" % (breakdown, e)
    return result


def fmt_num(x, digits=0):
    if x is None:
        return "n/a"
    return ("{:,.%df}" % digits).format(x)


def fmt_pct(x):
    return "n/a" if x is None else "%+.1f%%" % (100.0 * x)


def summary(values):
    values = [abs(v) for v in values if v is not None]
    if not values:
        return "no figures"
    return "median |error| %.1f%%, mean %.1f%%, largest %.1f%% (n = %d)" % (
        100 * statistics.median(values), 100 * statistics.mean(values), 100 * max(values),
        len(values))


def same_sheet(a, b):
    sa, sb = a.get("data_sheet"), b.get("data_sheet")
    if not isinstance(sa, dict) or not isinstance(sb, dict):
        return False
    keys = ("bandwidth_gbps", "sms", "boost_mhz", "fp32_tflops", "tf32_tflops", "fp16_bf16_tflops")
    return all(sa.get(k) == sb.get(k) for k in keys)


def ratio_pairs(figs, results):
    """Pairs of different cards that one source measured at one setting."""
    groups = {}
    for fig, res in zip(figs, results):
        key = (fig.get("source_id") or fig["source"], fig["precision"], bool(fig.get("channels_last")))
        groups.setdefault(key, []).append((fig, res))
    pairs = []
    for (source, precision, cl), members in sorted(groups.items()):
        for (fa, ra), (fb, rb) in itertools.combinations(members, 2):
            if fa["card"] == fb["card"]:
                continue  # the same card twice in one source is no ratio between cards
            if fa["images_per_second"] < fb["images_per_second"]:
                (fa, ra), (fb, rb) = (fb, rb), (fa, ra)  # the faster published card on top
            published = fa["images_per_second"] / fb["images_per_second"]
            pa, pb = ra.get("predicted_images_per_second"), rb.get("predicted_images_per_second")
            predicted = pa / pb if pa and pb else None
            error = predicted / published - 1 if predicted else None
            pairs.append({
                "source_id": source, "setting": setting_label(fa),
                "cards": "%s / %s" % (fa["card"], fb["card"]),
                "batches": "%d / %d" % (fa["batch"], fb["batch"]),
                "published_ratio": published, "predicted_ratio": predicted, "error": error,
                "same_data_sheet": same_sheet(ra, rb),
                "overlaps_calibration": bool(fa.get("overlaps_calibration") or fb.get("overlaps_calibration")),
            })
    return pairs


def report(figs, results, train):
    lines = []
    add = lines.append
    models = sorted({str(r.get("speed_model")) for r in results if r.get("speed_model")})
    add("# Held-out check of the speed model: published single-GPU ResNet-50 224x224 training")
    add("")
    add("Predicted by `%s memory --card CARD --card-only --settings S --batch-size B` "
        "(speed model: %s). Error = predicted / published - 1. Figures marked * are an earlier "
        "run of the calibration benchmark itself: shown, left out of the summaries." % (
            train, ", ".join(models) if models else "none reported"))
    add("")
    add("| # | card | setting | batch | source | published img/s | predicted img/s | error "
        "| largest batch at 224 | fits |")
    add("|---:|---|---|---:|---|---:|---:|---:|---:|---|")
    for fig, res in zip(figs, results):
        ips = res.get("predicted_images_per_second")
        err = ips / fig["images_per_second"] - 1 if ips else None
        res["relative_error"] = err
        largest = res.get("largest_batch")
        fits = "n/a"
        if isinstance(largest, int):
            fits = "yes" if largest >= fig["batch"] else "**no** (%d < %d)" % (largest, fig["batch"])
        add("| %d%s | %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
            res["index"], "*" if fig.get("overlaps_calibration") else "", fig["card"],
            setting_label(fig), fig["batch"], fig.get("source_id", ""),
            fmt_num(fig["images_per_second"]), fmt_num(ips),
            fmt_pct(err) if not res.get("error") else "failed: " + res["error"].replace("|", "/"),
            fmt_num(largest) if isinstance(largest, int) else "n/a", fits))
    add("")

    held = [(f, r) for f, r in zip(figs, results) if not f.get("overlaps_calibration")]
    add("## (a) Absolute error")
    add("")
    for precision, label in (("fp32", "fp32/TF32"), ("fp16", "AMP fp16")):
        errs = [r.get("relative_error") for f, r in held if f["precision"] == precision]
        add("- %s, held out: %s" % (label, summary(errs)))
        errs_all = [r.get("relative_error") for f, r in zip(figs, results) if f["precision"] == precision]
        add("- %s, with the calibration re-runs: %s" % (label, summary(errs_all)))
    by_source = {}
    for f, r in held:
        by_source.setdefault((f.get("source_id", ""), f["precision"]), []).append(r.get("relative_error"))
    add("")
    add("| source | precision | figures | median error (signed) | median |error| |")
    add("|---|---|---:|---:|---:|")
    for (source, precision), errs in sorted(by_source.items()):
        vals = [e for e in errs if e is not None]
        add("| %s | %s | %d | %s | %s |" % (
            source, precision, len(errs), fmt_pct(statistics.median(vals)) if vals else "n/a",
            "%.1f%%" % (100 * statistics.median([abs(v) for v in vals])) if vals else "n/a"))
    add("")

    pairs = ratio_pairs(figs, results)
    add("## (b) Ratio between two cards, as one source measured both")
    add("")
    add("Faster published card on top; same source, same precision and layout, each card at the "
        "source's own batch. Pairs of cards with one data sheet (e.g. V100-16GB / V100-32GB) are "
        "marked =.")
    add("")
    add("| source | setting | cards | batches | published ratio | predicted ratio | error |")
    add("|---|---|---|---|---:|---:|---:|")
    for p in pairs:
        add("| %s%s | %s | %s%s | %s | %.3f | %s | %s |" % (
            p["source_id"], "*" if p["overlaps_calibration"] else "", p["setting"], p["cards"],
            " =" if p["same_data_sheet"] else "", p["batches"], p["published_ratio"],
            "%.3f" % p["predicted_ratio"] if p["predicted_ratio"] else "n/a", fmt_pct(p["error"])))
    add("")
    held_pairs = [p for p in pairs if not p["overlaps_calibration"]]
    add("- all held-out pairs: %s" % summary([p["error"] for p in held_pairs]))
    add("- held-out pairs of different data sheets: %s" % summary(
        [p["error"] for p in held_pairs if not p["same_data_sheet"]]))
    for precision in ("fp32", "fp16"):
        add("- held-out pairs, %s: %s" % (precision, summary(
            [p["error"] for p in held_pairs if p["setting"].startswith(precision)])))
    add("- with the calibration re-runs' pairs: %s" % summary([p["error"] for p in pairs]))
    add("")
    add("| source | pairs | median |error| | largest |error| |")
    add("|---|---:|---:|---:|")
    by_source = {}
    for p in pairs:
        by_source.setdefault(p["source_id"] + ("*" if p["overlaps_calibration"] else ""), []).append(p["error"])
    for source, errs in sorted(by_source.items()):
        vals = [abs(e) for e in errs if e is not None]
        add("| %s | %d | %s | %s |" % (
            source, len(errs), "%.1f%%" % (100 * statistics.median(vals)) if vals else "n/a",
            "%.1f%%" % (100 * max(vals)) if vals else "n/a"))
    add("")

    add("## The largest batch at 224 against the published batch")
    add("")
    checked = [(f, r) for f, r in zip(figs, results) if isinstance(r.get("largest_batch"), int)]
    short = [(f, r) for f, r in checked if r["largest_batch"] < f["batch"]]
    add("- %d of %d figures have a predicted largest batch; %d of those at least the published batch."
        % (len(checked), len(figs), len(checked) - len(short)))
    for f, r in short:
        add("  - below: %s %s published at batch %d, predicted largest %d (%s)" % (
            f["card"], setting_label(f), f["batch"], r["largest_batch"], f.get("source_id", "")))
    add("")
    failed = [r for r in results if r.get("error")]
    if failed:
        add("## Runs that failed")
        add("")
        for r in failed:
            add("- #%d: %s" % (r["index"], r["error"]))
        add("")
    missing = [r for r in results if not r.get("error") and r.get("predicted_images_per_second") is None]
    if missing:
        add("%d run(s) gave no `predicted_images_per_second` or `predicted_step_seconds` (the speed "
            "model is not in this build's memory_breakdown.json, or it estimated nothing):" % len(missing))
        reasons = sorted({str(r.get("speed_not_estimated") or "no speed fields") for r in missing})
        for reason in reasons:
            add("- %s" % reason)
        add("")
    return "\n".join(lines), pairs


def only_cards(only, indexed, figure_cards, train):
    """The figures of `indexed` ((index, figure) pairs) on the cards `only` names (comma-separated),
    each card found by `train cards` as every --card finds it (no rule of this script's), as the
    figures' own cards were (`figure_cards`, in the figures' order). Raises BadInput to refuse."""
    wanted = script_support.items("--only", only)
    keep = {script_support.card_key(c) for c in script_support.train_cards(train, wanted, "--only")}
    chosen = [pair for pair, card in zip(indexed, figure_cards) if script_support.card_key(card) in keep]
    if not chosen:
        raise script_support.BadInput("--only %s matches no figure" % only)
    return chosen


def read_figures(path):
    """The figures of --figures `path`, each checked (BadInput names the first bad one)."""
    script_support.path_argument("--figures", path, "the held-out figures (a JSON list)")
    try:
        with open(path) as f:
            figs = json.load(f)
    except (OSError, ValueError) as e:
        raise script_support.BadInput("--figures %s: %s" % (path, script_support.describe(e))) from None
    if not isinstance(figs, list) or not figs:
        raise script_support.BadInput("--figures %s: expected a non-empty list" % path)
    for i, fig in enumerate(figs):
        if not isinstance(fig, dict):
            raise script_support.BadInput("figure %d is not an object" % i)
        for key in ("card", "precision", "batch", "images_per_second", "source"):
            if key not in fig:
                raise script_support.BadInput("figure %d has no %s" % (i, key))
        if not isinstance(fig["card"], str) or not fig["card"].strip():
            raise script_support.BadInput("figure %d: card %r is not a card's name" % (i, fig["card"]))
        if fig["precision"] not in ("fp32", "fp16"):
            raise script_support.BadInput("figure %d: precision %r is not fp32 or fp16" % (i, fig["precision"]))
        if not isinstance(fig["batch"], int) or isinstance(fig["batch"], bool) or fig["batch"] < 1:
            raise script_support.BadInput("figure %d: batch %r is not a positive whole number" % (i, fig["batch"]))
        rate = fig["images_per_second"]
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or rate <= 0:
            raise script_support.BadInput("figure %d: images_per_second %r is not a positive number" % (i, rate))
    return figs


def chosen_figures(args):
    """The (index, figure) pairs to run, every argument checked first: BadInput (one line, exit 2)
    before anything is run or written. Each figure's card is found by `train cards` here, with or
    without --only, so that an unknown one is refused rather than run (it needs a train: with
    --reuse and none, the cards are not checked and nothing is run that could find them)."""
    figs = read_figures(args.figures)
    if args.jobs < 1:
        raise script_support.BadInput("--jobs must be at least 1")
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise script_support.BadInput("--timeout must be a positive number of seconds")
    script_support.path_argument("--out", args.out, "a folder for the config, the runs and the report",
                                 kind="folder", must_exist=False)
    if args.only is not None and not args.only.strip():
        raise script_support.BadInput("--only: expected a value, got %s"
                                      % ("only blanks" if args.only else "an empty string"))
    script_support.path_argument("--train", args.train, "the train binary (build it: scripts/setup.sh)",
                                 must_exist=not args.reuse)
    train = args.train
    runnable = os.path.isfile(train) and os.access(train, os.X_OK)
    if not args.reuse and not runnable:
        raise script_support.BadInput("--train %s is not an executable file" % train)
    indexed = list(enumerate(figs))
    if args.only and not runnable:
        raise script_support.BadInput("--only: --train %s is not an executable file (`train cards` finds "
                                      "the cards named)" % train)
    if not runnable:
        return indexed
    figure_cards = script_support.train_cards(train, [f["card"] for f in figs], "--figures %s" % args.figures)
    return only_cards(args.only, indexed, figure_cards, train) if args.only else indexed


def of_precision(precision, indexed):
    """The figures of `indexed` at `precision` (all where None), each keeping its index, so that a
    run's folder is the same with or without the filter (--reuse reads it back)."""
    kept = [(i, fig) for i, fig in indexed if precision is None or fig["precision"] == precision]
    if indexed and not kept:
        raise script_support.BadInput("--precision %s matches no figure" % precision)
    return kept


class Runs:
    """The `train memory` runs under way in the pool's threads, so that an interrupt (Ctrl-C,
    SIGTERM: KeyboardInterrupt in the main thread only) kills each of them and starts no more; a
    thread's own subprocess.run would let its child run on."""

    def __init__(self):
        self.lock = threading.Lock()
        self.procs = set()
        self.stopped = False

    def run(self, cmd, timeout):
        """subprocess.run(cmd, timeout=timeout) with stdout and stderr together; None once stopped."""
        with self.lock:
            if self.stopped:
                return None
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    universal_newlines=True)
            self.procs.add(proc)
        try:
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
        finally:
            with self.lock:
                self.procs.discard(proc)
        return None if self.stopped else subprocess.CompletedProcess(cmd, proc.returncode, out)

    def stop(self):
        with self.lock:
            self.stopped = True
            for proc in self.procs:
                proc.kill()


def run_all(args, train, config, runs_dir, indexed):
    """run_one for each figure, args.jobs at once; on an interrupt every run is killed, the pool
    waited for, and the interrupt raised on."""
    runs = Runs()
    results = [None] * len(indexed)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    try:
        futures = {pool.submit(run_one, runs, train, config, runs_dir, i, fig, args.reuse, args.timeout): k
                   for k, (i, fig) in enumerate(indexed)}
        done = 0
        for future in concurrent.futures.as_completed(futures):
            k = futures[future]
            results[k] = future.result()
            done += 1
            i, fig = indexed[k]
            print("speed_holdout: %d/%d %s %s b%d%s" % (
                done, len(indexed), fig["card"], setting_label(fig), fig["batch"],
                " failed: " + results[k]["error"] if results[k].get("error") else ""),
                file=sys.stderr)
    except BaseException:
        runs.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return results


def main(argv=None):
    parser = script_support.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", default="build/train", help="the train executable (default build/train)")
    parser.add_argument("--figures", default=os.path.join(HERE, "speed_holdout.json"),
                        help="the held-out figures (default: speed_holdout.json beside this script)")
    parser.add_argument("--out", default="runs/speed-holdout",
                        help="folder for the config, the runs and the report (default runs/speed-holdout)")
    parser.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                        help="train runs at once (each uses one CPU thread)")
    parser.add_argument("--reuse", action="store_true",
                        help="read each run's memory_breakdown.json where it exists instead of running train")
    parser.add_argument("--only", help="comma-separated cards to keep (default: all)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one train run")
    parser.add_argument("--precision", choices=["fp32", "fp16"],
                        help="only the figures at this precision (fp16 steps are recorded slowly "
                             "on a CPU without native fp16: minutes each)")
    args = parser.parse_args(argv)
    indexed = of_precision(args.precision, chosen_figures(args))
    train = args.train

    os.makedirs(args.out, exist_ok=True)
    runs_dir = os.path.join(args.out, "runs")
    if os.path.isdir(runs_dir) and os.listdir(runs_dir) and not os.path.exists(os.path.join(runs_dir, MARKER)):
        raise script_support.BadInput("%s exists and is not this script's: give another --out" % runs_dir)
    os.makedirs(runs_dir, exist_ok=True)
    open(os.path.join(runs_dir, MARKER), "a").close()
    config = os.path.abspath(os.path.join(args.out, "resnet50_imagenet_224.yaml"))
    with open(config, "w") as f:
        f.write(CONFIG_224)

    results = run_all(args, train, config, runs_dir, indexed)
    chosen = [fig for _, fig in indexed]
    text, pairs = report(chosen, results, train)
    print(text)
    with open(os.path.join(args.out, "speed_holdout.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "speed_holdout_results.json"), "w") as f:
        json.dump({"figures": [dict(fig, prediction=res) for fig, res in zip(chosen, results)],
                   "pairs": pairs}, f, indent=1)
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(script_support.run("speed_holdout", main))
