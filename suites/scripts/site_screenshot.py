"""Screenshot a page of a published history site in headless Chromium (Debian's chromium and chromium-driver).

    python -m rlbench.suites.scripts.site_screenshot reports/history/bench-ppo-cartpole.html reports/history.png

Opens the page from ``file://`` (no network), scrolls through it so every lazily drawn chart is drawn, waits until
the charts are drawn, and saves a full-page PNG (a 256-colour palette one, for the reports' size budget). Exits 1
on a console error (a broken page is not screenshotted as if it were fine), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rlbench.report.plots import save_png_bytes

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def headless_chromium(width: int, height: int, *, browser_log: bool = False) -> Any:
    """A selenium driver of Debian's headless chromium at ``width`` x ``height`` (``browser_log``: keep the page's
    console, for ``driver.get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    if browser_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("page", type=Path, help="an HTML page of a site written by `rlbench publish`")
    p.add_argument("png", type=Path, help="the PNG to write")
    p.add_argument("--width", type=int, default=1280, help="window width in pixels (default 1280)")
    p.add_argument("--max-height", type=int, default=2400, help="cut the page at this height (default 2400)")
    args = p.parse_args(argv)
    if not args.page.is_file():
        print(f"site_screenshot: error: no such page: {args.page}", file=sys.stderr)
        return 2
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        print(
            "site_screenshot: error: needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
            file=sys.stderr,
        )
        return 2
    driver = headless_chromium(args.width, 900, browser_log=True)
    try:
        driver.get(args.page.resolve().as_uri())
        height = int(driver.execute_script("return document.body.scrollHeight"))
        for y in range(0, height, 600):  # charts draw as they scroll into view
            driver.execute_script(f"window.scrollTo(0, {y})")
            time.sleep(0.15)
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.5)
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        if errors:
            print(
                f"site_screenshot: error: the page logged {len(errors)} console error(s): {errors[0].get('message')}",
                file=sys.stderr,
            )
            return 1
        driver.set_window_size(args.width, min(height, args.max_height))
        time.sleep(0.5)
        args.png.parent.mkdir(parents=True, exist_ok=True)
        save_png_bytes(driver.get_screenshot_as_png(), args.png)
    finally:
        driver.quit()
    print(f"site_screenshot: {args.png} ({args.width}x{min(height, args.max_height)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
