import json, urllib.request, sys, collections
c=collections.Counter()
for i in range(int(sys.argv[1])):
    req=urllib.request.Request("http://127.0.0.1:18766/mcp", data=json.dumps({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}).encode(), headers={"Authorization":"Bearer tok","Content-Type":"application/json","Accept":"application/json, text/event-stream"})
    try:
        r=urllib.request.urlopen(req, timeout=30); r.read(); c[r.status]+=1
    except urllib.error.HTTPError as e: c[e.code]+=1
print(dict(c))
