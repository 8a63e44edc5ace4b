-- The helpers every cellvisor language offers (see PRELUDE.md): read, write, append, sort,
-- uniq, counter, diff, tree, env, output, plus `tool.<name>(args)` for host tools and
-- `ALL_TOOLS` (set by the engine before each cell). Runs once per worker, after prelude.lua.
--
-- Argument: `host`, the Rust functions in host_table.rs. They answer `value` or `nil, message`;
-- failures become `error(message, 2)` here, so a helper's error points at the cell's line.
-- Every helper that succeeds sends one status event through `host.status`.
local host = ...

local type, error, format, tostring = type, error, string.format, tostring
local math_type, tointeger = math.type, math.tointeger
local status = host.status
local getinfo = debug and debug.getinfo
local HELPERS_SOURCE = "=cellvisor helpers"

-- The `error` level, for the function calling this one, of the first caller outside this
-- file: `error(message, outside_level())` then blames the cell's line that called a helper,
-- however deep in this file the check sits.
local function outside_level()
  if getinfo == nil then
    return 2
  end
  local level = 3
  while true do
    local info = getinfo(level, "S")
    if info == nil or info.source ~= HELPERS_SOURCE then
      return level - 1
    end
    level = level + 1
  end
end

-- Raises `message` at the cell's line that called the helper.
local function bad_argument(message)
  error(message, outside_level())
end

local function check_string(helper, name, value)
  if type(value) ~= "string" then
    bad_argument(format("%s: %s must be a string, not %s", helper, name, type(value)))
  end
  return value
end

local function check_path(helper, path)
  check_string(helper, "path", path)
  if path == "" then
    bad_argument(format("%s: path must not be empty", helper))
  end
  return path
end

-- An integer (or a float with an integral value) of at least `minimum`; `default` when nil.
local function check_count(helper, name, value, default, minimum)
  if value == nil then
    return default
  end
  local integer = type(value) == "number" and tointeger(value) or nil
  if integer == nil then
    local kind = math_type(value) == "float" and "non-integral number" or type(value)
    bad_argument(format("%s: %s must be an integer, not %s", helper, name, kind))
  end
  if integer < minimum then
    bad_argument(format("%s: %s must be at least %d, not %d", helper, name, minimum, integer))
  end
  return integer
end

-- Raises the host's failure message at the caller of the helper, or passes values through.
local function checked(first, ...)
  if first == nil then
    error((...), outside_level())
  end
  return first, ...
end

-- read(path, offset?, limit?, numbered?) or read(path, {offset =, limit =, numbered =}).
function read(path, offset, limit, numbered)
  check_path("read", path)
  if type(offset) == "table" then
    offset, limit, numbered = offset.offset, offset.limit, offset.numbered
  end
  offset = check_count("read", "offset", offset, 1, 1)
  limit = check_count("read", "limit", limit, nil, 0)
  if numbered ~= nil and type(numbered) ~= "boolean" then
    bad_argument(format("read: numbered must be true or false, not %s", type(numbered)))
  end
  local text, lines = checked(host.read(path, offset, limit, numbered == true))
  status({ op = "read", path = path, lines = lines, offset = offset })
  return text
end

-- write and append differ only in whether the host keeps what the file held.
local function put_text(op, path, content)
  check_path(op, path)
  check_string(op, "content", content)
  local bytes = checked(host.store(path, content, op == "append"))
  status({ op = op, path = path, bytes = bytes })
end

function write(path, content)
  put_text("write", path, content)
end

function append(path, content)
  put_text("append", path, content)
end

function sort(text, reverse, unique)
  check_string("sort", "text", text)
  local sorted, lines = host.sort(text, not not reverse, not not unique)
  status({ op = "sort", lines = lines })
  return sorted
end

function uniq(text, count)
  check_string("uniq", "text", text)
  local collapsed, lines = host.uniq(text, not not count)
  status({ op = "uniq", lines = lines })
  return collapsed
end

-- The lines of `text`, split on "\n" only (a final newline ends the last line).
local function lines_of(text)
  local lines, start = {}, 1
  while start <= #text do
    local newline = text:find("\n", start, true)
    if newline == nil then
      lines[#lines + 1] = text:sub(start)
      break
    end
    lines[#lines + 1] = text:sub(start, newline - 1)
    start = newline + 1
  end
  return lines
end

function counter(items, limit, reverse)
  limit = check_count("counter", "limit", limit, nil, 0)
  if type(items) == "string" then
    items = lines_of(items)
  elseif type(items) ~= "table" then
    bad_argument(format("counter: items must be a table or a string, not %s", type(items)))
  end
  local counts, first_seen, order = {}, {}, {}
  for index = 1, #items do
    local item = items[index]
    local kind = type(item)
    if kind ~= "string" and kind ~= "number" then
      bad_argument(format("counter: items must be strings or numbers, not %s", kind))
    elseif item ~= item then
      bad_argument("counter: items must not be NaN")
    end
    if counts[item] == nil then
      counts[item] = 0
      first_seen[item] = index
      order[#order + 1] = item
    end
    counts[item] = counts[item] + 1
  end
  table.sort(order, function(x, y)
    if counts[x] ~= counts[y] then
      if reverse then
        return counts[x] < counts[y]
      end
      return counts[x] > counts[y]
    end
    return first_seen[x] < first_seen[y]
  end)
  local pairs_out = {}
  for index = 1, limit == nil and #order or math.min(limit, #order) do
    local item = order[index]
    pairs_out[index] = { item, counts[item] }
  end
  status({ op = "counter", items = #order })
  return pairs_out
end

function diff(a, b)
  check_string("diff", "a", a)
  check_string("diff", "b", b)
  local text, added, removed = host.diff(a, b)
  status({ op = "diff", added = added, removed = removed })
  return text
end

function tree(path, max_depth, show_hidden)
  if path == nil then
    path = "."
  end
  check_path("tree", path)
  max_depth = check_count("tree", "max_depth", max_depth, 3, 1)
  local listing, entries = checked(host.tree(path, max_depth, not not show_hidden))
  status({ op = "tree", path = path, entries = entries })
  return listing
end

function env(key, value)
  if key == nil then
    if value ~= nil then
      bad_argument("env: a value needs a key")
    end
    status({ op = "env" })
    return host.env_all()
  end
  check_string("env", "key", key)
  if value == nil then
    if key == "" or key:find("=", 1, true) then
      bad_argument(format("env: invalid variable name '%s'", key))
    end
    status({ op = "env", key = key })
    return os.getenv(key)
  end
  if type(value) == "number" then
    value = tostring(value)
  end
  check_string("env", "value", value)
  checked(host.env_set(key, value))
  status({ op = "env", key = key })
end

function output(...)
  local ids = { ... }
  local count = select("#", ...)
  if count == 0 then
    bad_argument("output: give at least one output id")
  end
  for index = 1, count do
    local id = ids[index]
    if math_type(id) == "integer" then
      ids[index] = tostring(id)
    elseif type(id) ~= "string" then
      bad_argument(format("output: id must be a string, not %s", type(id)))
    end
  end
  local text, bytes = checked(host.artifacts(ids))
  status({ op = "output", ids = ids, bytes = bytes })
  return text
end

-- tool.<name>(args): calls the host's tool and waits for its result (JSON as Lua values).
local function unknown_tool(name)
  local names = host.tool_names()
  if #names == 0 then
    return format("no tool named '%s'; the host declared no tools for this cell", tostring(name))
  end
  return format("no tool named '%s'; declared tools: %s", tostring(name), table.concat(names, ", "))
end

-- A tool is reachable by its name (`tool["list-dir"]`) and by its identifier (`tool.list_dir`).
tool = setmetatable({}, {
  __index = function(_, name)
    local declared = host.resolve_tool(name)
    if declared == nil then
      error(unknown_tool(name), 2)
    end
    return function(args, ...)
      if select("#", ...) > 0 then
        error(format("tool.%s takes one table of arguments", name), 2)
      end
      local result, message = host.call_tool(declared, args)
      if message ~= nil then
        error(message, 2)
      end
      return result
    end
  end,
  __tostring = function()
    return "<host tools: " .. table.concat(host.tool_names(), ", ") .. ">"
  end,
})
tools = tool
ALL_TOOLS = {}
