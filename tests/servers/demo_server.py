"""Demo MCP server with FICTIONAL financial data, used by config.example.yaml.

Every number here is made up (derived deterministically from a few constants)
so examples and tests are reproducible; none of it reflects real companies.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stdio_mcp import Server, text  # noqa: E402

# Latest fictional quarter per ticker: revenue and total assets in USD, plus ratios.
COMPANIES = {
    "AMZN": {"revenue": 170.0e9, "net_margin": 0.09, "assets": 620.0e9, "debt_ratio": 0.55},
    "GOOG": {"revenue": 96.0e9, "net_margin": 0.28, "assets": 450.0e9, "debt_ratio": 0.27},
    "MSFT": {"revenue": 70.0e9, "net_margin": 0.36, "assets": 540.0e9, "debt_ratio": 0.42},
}
STATEMENTS = ("income", "balance", "cashflow")
PERIODS = ("quarter", "annual")
LATEST_YEAR, LATEST_QUARTER = 2026, 3
MAX_LIMIT = 20


def period_labels(period, count):
    """Most recent first: 2026-Q3, 2026-Q2, ... or 2025, 2024, ..."""
    if period == "annual":
        return [str(LATEST_YEAR - 1 - i) for i in range(count)]
    labels = []
    year, quarter = LATEST_YEAR, LATEST_QUARTER
    for _ in range(count):
        labels.append(f"{year}-Q{quarter}")
        year, quarter = (year, quarter - 1) if quarter > 1 else (year - 1, 4)
    return labels


def statement_row(company, statement, period, periods_back):
    """Figures shrink going back in time (2% a quarter, 8% a year)."""
    annual = period == "annual"
    shrink = (0.92 if annual else 0.98) ** periods_back
    revenue = company["revenue"] * shrink * (4 if annual else 1)  # flows add up over a year
    if statement == "income":
        figures = {"revenue": revenue, "net_income": revenue * company["net_margin"]}
    elif statement == "balance":
        assets = company["assets"] * shrink  # a stock, not a flow: no yearly sum
        figures = {"total_assets": assets, "total_liabilities": assets * company["debt_ratio"]}
    else:
        operating = revenue * (company["net_margin"] + 0.1)
        figures = {"operating_cash_flow": operating, "free_cash_flow": operating * 0.6}
    # Round to 0.1 billion so the output reads like a real filing, not float noise.
    return {name: round(value, -8) for name, value in figures.items()}


def error(message):
    return {"content": [text(message)], "isError": True}


def build_server():
    server = Server("demo")

    @server.tool(
        "query_financials",
        "Fetch recent financial statement figures for one company, most recent period first. "
        "Returns a JSON list of rows such as "
        '{"ticker": "AMZN", "period": "2026-Q3", "revenue": 170000000000.0, '
        '"net_income": 15300000000.0}. Amounts are in US dollars. Fictional demo data.',
        {
            "type": "object",
            "properties": {
                "ticker": {"type": "string",
                           "description": "Stock ticker, e.g. AMZN; see list_tickers."},
                "statement": {"type": "string", "enum": list(STATEMENTS), "default": "income",
                              "description": "income: revenue, net_income; "
                                             "balance: total_assets, total_liabilities; "
                                             "cashflow: operating_cash_flow, free_cash_flow."},
                "period": {"type": "string", "enum": list(PERIODS), "default": "quarter",
                           "description": "Fiscal quarters (2026-Q3) or years (2025)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 4,
                          "description": "Number of periods to return."},
            },
            "required": ["ticker"],
        },
        title="Query financial statements",
        annotations={"readOnlyHint": True, "openWorldHint": False},
    )
    def query_financials(args):
        ticker = str(args.get("ticker", ""))
        statement = args.get("statement", "income")
        period = args.get("period", "quarter")
        limit = args.get("limit", 4)
        company = COMPANIES.get(ticker.upper())
        if company is None:
            return error(f"unknown ticker {ticker!r}; known: {', '.join(sorted(COMPANIES))}")
        if statement not in STATEMENTS:
            return error(f"unknown statement {statement!r}; expected one of {', '.join(STATEMENTS)}")
        if period not in PERIODS:
            return error(f"unknown period {period!r}; expected one of {', '.join(PERIODS)}")
        if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
            return error(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
        rows = [
            {"ticker": ticker.upper(), "period": label,
             **statement_row(company, statement, period, back)}
            for back, label in enumerate(period_labels(period, limit))
        ]
        return {"content": [text(json.dumps(rows))]}

    @server.tool(
        "list_tickers",
        "List the tickers query_financials knows about, as a JSON list of strings.",
        {"type": "object", "properties": {}},
        title="List known tickers",
        annotations={"readOnlyHint": True, "openWorldHint": False},
    )
    def list_tickers(args):
        return {"content": [text(json.dumps(sorted(COMPANIES)))]}

    return server


if __name__ == "__main__":
    build_server().serve()
