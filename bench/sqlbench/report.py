"""Results as JSON, a Markdown table, and PNG plots (recall@10 vs QPS per client count;
build time and index size)."""
import json
import os
import sys

# The GPU machine's Python may lack matplotlib: the JSON and the table are still
# written there, and the plots are drawn later with --report-only.
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
except ImportError:
    plt = None

from .methods import setting_label  # noqa: E402

# One look per method in every panel: (line style, color)
STYLES = {"tsdg": ("o-", "tab:blue"), "tsdg_search_batch": ("d:", "tab:green"),
          "pgvector hnsw": ("s--", "tab:red"), "exact scan": ("*", "black")}


def write_json(results, out_dir):
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)


def markdown(results):
    ds = results["dataset"]
    lines = ["Dataset: %s, %d rows x %d dims, %d queries, k = %d. Machine: %s. %s."
             % (ds.get("kind"), ds["rows"], ds["dim"], results["queries"], results["k"],
                results["machine"]["summary"], results["date"]), ""]
    lines += ["| method | options | build (s) | index size (MB) |",
              "|---|---|---:|---:|"]
    for idx in results["indexes"]:
        lines.append("| %s | %s | %.1f | %.1f |" % (idx["method"], idx["options"],
                                                   idx["build_seconds"], idx["size_bytes"] / 1e6))
    lines += ["", "| method | setting | recall@10 | clients | QPS | p50 (ms) | p99 (ms) |",
              "|---|---|---:|---:|---:|---:|---:|"]
    order = {m: i for i, m in enumerate(dict.fromkeys(r["method"] for r in results["runs"]))}
    for run in sorted(results["runs"], key=lambda r: order[r["method"]]):
        lat = run["latency_ms"]
        clients = ("1 call of %d queries" % run["batch"]) if run.get("batch") else str(run["clients"])
        latency = ("%.2f | %.2f" % (lat["p50"], lat["p99"])) if lat else "- | -"
        lines.append("| %s | %s | %.3f | %s | %.0f | %s |"
                     % (run["method"], setting_label(run["settings"]), run["recall"],
                        clients, run["qps"], latency))
    return "\n".join(lines) + "\n"


def write_markdown(results, out_dir):
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(markdown(results))


def plot_recall_qps(results, path):
    clients = sorted({r["clients"] for r in results["runs"]})
    if not clients:
        return
    methods = list(dict.fromkeys(r["method"] for r in results["runs"]))
    fig, axes = plt.subplots(1, len(clients), figsize=(4.2 * len(clients), 3.6),
                             squeeze=False, sharex=True, sharey=True)
    for ax, c in zip(axes[0], clients):
        for m in methods:
            runs = sorted((r for r in results["runs"] if r["method"] == m and r["clients"] == c),
                          key=lambda r: r["recall"])
            if not runs:
                continue
            style, color = STYLES.get(m, ("^-", "tab:purple"))
            ax.plot([r["recall"] for r in runs], [r["qps"] for r in runs], style, color=color,
                    label=m, markersize=5)
            if len(runs) > 1 and m != "tsdg_search_batch":
                # alternate sides so that neighbouring labels do not overprint
                for i, r in enumerate(runs):
                    ax.annotate(setting_label(r["settings"]).replace("ef_search=", "ef "),
                                (r["recall"], r["qps"]), fontsize=6, textcoords="offset points",
                                xytext=(4, 3) if i % 2 == 0 else (-4, -9),
                                ha="left" if i % 2 == 0 else "right")
        ax.set_title("%d client%s" % (c, "" if c == 1 else "s"), fontsize=10)
        ax.set_xlabel("recall@%d" % results["k"])
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    lowest = min(r["recall"] for r in results["runs"])
    axes[0][0].set_xlim(max(0.0, lowest - 0.05), 1.02)
    axes[0][0].set_ylabel("queries per second")
    handles = {}
    for ax in axes[0]:
        handles.update(zip(ax.get_legend_handles_labels()[1], ax.get_legend_handles_labels()[0]))
    axes[0][0].legend(handles.values(), handles.keys(), fontsize=8, loc="lower left")
    ds = results["dataset"]
    fig.suptitle("%d x %d %s, %s" % (ds["rows"], ds["dim"], ds.get("kind"),
                                      results["machine"]["summary"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_build(results, path):
    indexes = results["indexes"]
    if not indexes:
        return
    names = [i["method"] for i in indexes]
    fig, (ax_time, ax_size) = plt.subplots(1, 2, figsize=(8, 0.6 * len(names) + 1.6))
    ax_time.barh(names, [i["build_seconds"] for i in indexes], color="tab:blue")
    ax_time.set_xlabel("build time (s)")
    ax_size.barh(names, [i["size_bytes"] / 1e6 for i in indexes], color="tab:orange")
    ax_size.set_xlabel("index size (MB)")
    ax_size.set_yticks([])
    for ax, values in ((ax_time, [i["build_seconds"] for i in indexes]),
                       (ax_size, [i["size_bytes"] / 1e6 for i in indexes])):
        for y, v in enumerate(values):
            ax.annotate("%.1f" % v, (v, y), fontsize=8, va="center",
                        textcoords="offset points", xytext=(3, 0))
        ax.set_xlim(0, max(values) * 1.25 or 1)
    ds = results["dataset"]
    fig.suptitle("CREATE INDEX on %d x %d rows" % (ds["rows"], ds["dim"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_all(results, out_dir):
    write_json(results, out_dir)
    write_markdown(results, out_dir)
    if plt is None:
        sys.stderr.write("matplotlib is missing: no plots (redraw them with --report-only)\n")
        return
    plot_recall_qps(results, os.path.join(out_dir, "recall_qps.png"))
    plot_build(results, os.path.join(out_dir, "build.png"))
