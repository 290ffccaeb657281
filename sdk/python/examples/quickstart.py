"""Three lines to a secure sandbox, and what it refuses."""

from stockade import Stockade

with Stockade().create() as sb:
    print(sb.exec(["python3", "-c", "print('hello from a sandbox')"]).stdout, end="")
    r = sb.run_code("import urllib.request\ntry:\n    urllib.request.urlopen('http://1.1.1.1', timeout=2)\nexcept OSError as e:\n    print('network blocked:', type(e).__name__)")
    print(r.stdout, end="")
    print("write to /usr:", "refused" if sb.exec("touch /usr/x").exit_code else "allowed")
