"""The playground page (GET /) in a real browser: Debian's chromium and chromium-driver through
python3-selenium, headless (--no-sandbox, as tests run as root). It loads the page from a real
`lockstep serve --http 127.0.0.1:0`, submits a prompt with a seed, waits for the streamed text
and checks that the text shown equals the API's /v1/completions text for the same request.
Skipped, with a message saying what is missing, only where chromium, chromium-driver or selenium
is not installed. LOCKSTEP_PLAYGROUND_SCREENSHOT=PATH saves a screenshot there (docs/playground.png
was taken so); LOCKSTEP_PLAYGROUND_MODEL=DIR serves that model instead of the tiny one.
Beside it, a page on another origin (a second loopback server) calls the API with fetch, through
a CORS preflight: it gets the text when `--cors-origin` names its origin, a TypeError when not."""
import os
import shutil
import signal
import socket
import threading
import time

import pytest

DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
BROWSER = shutil.which("chromium") or "/usr/bin/chromium"


def missing():
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "python3-selenium is not installed (apt-get install python3-selenium)"
    for path, package in [(BROWSER, "chromium"), (DRIVER, "chromium-driver")]:
        if not os.path.exists(path):
            return f"{package} is not installed ({path} missing; apt-get install {package})"
    return None


REASON = missing()
if REASON:
    print(f"\nSKIPPING the playground browser test: {REASON}")


class StreamCutter:
    """A loopback proxy in front of the server that cuts the connection of the first `cuts`
    streamed answers (text/event-stream) `after` bytes into them, as a replica's death would."""

    def __init__(self, port, cuts, after):
        self.port, self.cuts, self.after = port, cuts, after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.done = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def url(self):
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/"

    def accept(self):
        while not self.done.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            threading.Thread(target=self.pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, True), daemon=True).start()

    def pump(self, src, dst, answers):
        seen, cutting = b"", False
        try:
            while True:
                data = src.recv(4096)
                if not data:
                    break
                if answers and not cutting:
                    seen = (seen + data)[-65536:]
                    mark = seen.find(b"text/event-stream")
                    if mark >= 0 and len(seen) - mark > self.after:
                        with self.lock:
                            cutting = self.cuts > 0
                            self.cuts -= cutting
                        if cutting:
                            dst.sendall(data[: max(0, len(data) - (len(seen) - mark - self.after))])
                            # The replica dies a moment later: the page has shown what it got.
                            time.sleep(0.5)
                            break
                        seen = b""
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.done.set()
        self.listener.close()


def chromium(tmp_path):
    """Headless Chromium through chromium-driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=900,560", f"--user-data-dir={tmp_path / 'chromium'}"]:
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


CROSS_ORIGIN_PAGE = """<!doctype html><meta charset="utf-8"><title>app</title><pre id="out">waiting</pre>
<script>
// What a web app on another origin does: JSON, a bearer key and a client's own header, so the
// browser sends a CORS preflight first.
fetch(API + "/v1/completions", {method: "POST",
  headers: {"Content-Type": "application/json", "Authorization": "Bearer s3cret", "X-Stainless-Lang": "js"},
  body: JSON.stringify({prompt: "Once upon a ", max_tokens: 24, temperature: 0.8, seed: 7})})
  .then(r => r.json()).then(j => { document.getElementById("out").textContent = "ok:" + j.choices[0].text; })
  .catch(e => { document.getElementById("out").textContent = "error:" + e; });
</script>"""


@pytest.mark.skipif(REASON is not None, reason=f"playground browser test: {REASON}")
@pytest.mark.parametrize("allowed", [True, False], ids=["allowed", "not-allowed"])
def test_a_page_from_another_origin_calls_the_api_through_cors(allowed, serve, tmp_path):
    import http.server
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    site = tmp_path / "site"
    site.mkdir()
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(site), **k)  # noqa: E731
    pages = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{pages.server_address[1]}"
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    key.chmod(0o600)  # group or others may not read a key file
    s = serve("--http", "127.0.0.1:0", "--api-key-file", str(key), *(["--cors-origin", origin] if allowed else []))
    (site / "app.html").write_text(CROSS_ORIGIN_PAGE.replace("API", f'"http://127.0.0.1:{s.port}"', 1))
    driver = chromium(tmp_path)
    try:
        driver.set_page_load_timeout(30)
        driver.get(origin + "/app.html")
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "out").text != "waiting")
        shown = driver.execute_script("return document.getElementById('out').textContent;")
    finally:
        driver.quit()
        pages.shutdown()
    status, answer = s.post("/v1/completions", dict(prompt="Once upon a ", max_tokens=24, temperature=0.8, seed=7),
                            headers={"Authorization": "Bearer s3cret"})
    assert status == 200, answer
    if allowed:
        assert shown == "ok:" + answer["choices"][0]["text"]
    else:  # the browser refuses the answer to a page of an origin the server did not name
        assert shown.startswith("error:TypeError"), shown


@pytest.mark.skipif(REASON is not None, reason=f"playground browser test: {REASON}")
@pytest.mark.parametrize("cuts", [0, 2], ids=["whole", "resumed"])
def test_playground_shows_the_api_text(cuts, serve, model, tmp_path, request):
    def request_finalizer(server):
        request.addfinalizer(lambda: server.stop(signal.SIGKILL))

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    if "LOCKSTEP_PLAYGROUND_MODEL" in os.environ:
        from conftest import Server
        s = Server(os.environ["LOCKSTEP_PLAYGROUND_MODEL"], ["--http", "127.0.0.1:0"], tmp_path)
        request_finalizer(s)
    else:
        s = serve("--http", "127.0.0.1:0")
    assert s.port, s.banner + s.err()
    request = dict(prompt=os.environ.get("LOCKSTEP_PLAYGROUND_PROMPT", "Once upon a "), max_tokens=48,
                   temperature=0.8, top_p=1.0, top_k=0, seed=7)

    driver = chromium(tmp_path)
    # With cuts, the page comes through a proxy that breaks the stream twice mid-way: the page
    # resends the same request and continues the text exactly.
    cutter = StreamCutter(s.port, cuts, after=2500) if cuts else None
    try:
        driver.set_page_load_timeout(30)
        driver.set_script_timeout(30)
        driver.get(cutter.url() if cutter else f"http://127.0.0.1:{s.port}/")
        for field in ["prompt", "max_tokens", "temperature", "top_p", "top_k", "seed"]:
            element = driver.find_element(By.ID, field)
            element.clear()
            element.send_keys(str(request[field]))
        driver.find_element(By.ID, "go").click()
        WebDriverWait(driver, 30).until(
            lambda d: "finish_reason" in d.find_element(By.ID, "status").text
            or d.find_element(By.ID, "status").text.startswith("error"))
        status = driver.find_element(By.ID, "status").text
        assert "finish_reason length" in status, status
        # textContent of the generated spans (not the prompt's), exactly as the page holds it.
        shown = driver.execute_script(
            "return Array.from(document.querySelectorAll('#output span:not(.prompt)'))"
            ".map(s => s.textContent).join('');")
        prompt_shown = driver.execute_script("return document.querySelector('#output span.prompt').textContent;")
        WebDriverWait(driver, 5).until(lambda d: d.find_element(By.ID, "model").text != "?")
        time.sleep(0.2)
        resumes = driver.find_element(By.ID, "status").get_attribute("data-resumes")
        resumed_after = driver.find_element(By.ID, "status").get_attribute("data-resumed-after")
        shot = (cuts == 0 and os.environ.get("LOCKSTEP_PLAYGROUND_SCREENSHOT")) or str(tmp_path / "playground.png")
        assert driver.save_screenshot(shot), shot
        page_sha = driver.find_element(By.ID, "status").get_attribute("data-sha256")
    finally:
        driver.quit()
        if cutter:
            cutter.close()

    status_code, answer = s.post("/v1/completions", request)
    assert status_code == 200, answer
    choice = answer["choices"][0]
    assert prompt_shown == request["prompt"]
    assert shown == choice["text"] and len(shown) > 0
    assert page_sha == choice["sha256"]
    assert (resumes or "0") == str(cuts)
    if cuts:  # text was shown before a cut, so the page had to skip it when it came again
        assert max(int(n) for n in resumed_after.split(",")) > 0, resumed_after
    assert os.path.getsize(shot) > 1000


@pytest.mark.skipif(REASON is not None, reason=f"playground browser test: {REASON}")
def test_playground_sends_a_seed_past_2_to_the_53_exactly(serve, tmp_path):
    """The page sent Number(seed): 2^53 + 1 went out as 2^53 (another request's text) and
    2^64 - 1 as 2^64, which the API refuses (issue 42). The digits typed are sent as they are."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    s = serve("--http", "127.0.0.1:0")
    driver = chromium(tmp_path)
    shown = {}
    try:
        driver.set_page_load_timeout(30)
        driver.get(f"http://127.0.0.1:{s.port}/")
        for seed in (2 ** 53 + 1, 2 ** 64 - 1, "-1"):
            element = driver.find_element(By.ID, "seed")
            element.clear()
            element.send_keys(str(seed))
            driver.execute_script("document.getElementById('status').textContent = '';")
            driver.find_element(By.ID, "go").click()
            WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "status").text.startswith(("finish", "error")))
            shown[seed] = (driver.find_element(By.ID, "status").text,
                           driver.find_element(By.ID, "status").get_attribute("data-sha256"))
    finally:
        driver.quit()
    for seed in (2 ** 53 + 1, 2 ** 64 - 1):
        status, answer = s.post("/v1/completions", dict(prompt="Once upon a time", max_tokens=64, temperature=0.8,
                                                        top_p=1.0, top_k=0, seed=seed))
        assert status == 200, answer
        assert shown[seed][1] == answer["choices"][0]["sha256"], (seed, shown[seed])
        assert f"seed {seed}," in shown[seed][0], shown[seed]
    assert "the seed must be an integer in [0, 18446744073709551615]" in shown["-1"][0], shown["-1"]
