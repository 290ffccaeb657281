"""run_code as a LangChain StructuredTool (pip install langchain-core)."""

from stockade import tools

run_code = tools.langchain_tool()
print("tool:", run_code.name, sorted(run_code.args))
print("tool result:", run_code.invoke({"language": "python", "code": "print(2 ** 100)"})["stdout"].strip())
