"""Number formats and line wrapping of the document."""
import textwrap


def fmt_ms(x):
    if x >= 0.1:
        return "%.1f" % (x * 1e3)
    return "%.2f" % (x * 1e3)


def fmt_tps(x):
    return "%.0f" % x if x >= 10 else "%.1f" % x


def bound_of(r):
    parts = r["parts"]
    items = dict(HBM=parts["hbm"], launches=parts["launch"], syncs=parts["sync"],
                 PCIe=parts["pcie"], CPU=r["idle"])
    return max(items, key=items.get)


def wrap(text):
    """Prose wrapped under 100 columns; headings, tables, quotes and lists' first lines kept."""
    out = []
    for para in text.split("\n"):
        if para.startswith(("|", "#", ">", "`")) or len(para) < 100:
            out.append(para)
            continue
        indent = "  " if para.startswith(("- ", "1. ", "2. ", "3. ")) else ""
        out.append(textwrap.fill(para, 99, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out)

