-- The code-mode helpers (the same contract as in JavaScript and Python, synchronous):
-- text(value), image(data_url, detail?), audio(data_url), notify(value), store(key, value),
-- load(key), exit(), yield_control(); `tools.tool_search{query, limit?}` when the cell has tools. Runs once
-- per worker, after helpers.lua.
--
-- `load` was Lua's function to compile a chunk: it stays reachable as `lua_load`. `exit`
-- and `os.exit` are set by the engine (they must stop the cell from the inside, see
-- interrupt.rs).
--
-- Argument: `host`, the Rust functions in host_table.rs (`value` or `nil, message`).
local host = ...

local type, error, format, tostring, pairs = type, error, string.format, tostring, pairs
local math_type, tointeger = math.type, math.tointeger
local rawget, tonumber, select = rawget, tonumber, select

lua_load = load

-- Strings as they are, anything else as JSON (its tostring when it is not JSON).
local function as_text(value)
  if type(value) == "string" then
    return value
  end
  return host.json_text(value) or tostring(value)
end

function text(value)
  local out = as_text(value)
  if out:sub(-1) ~= "\n" then
    out = out .. "\n"
  end
  io.write(out)
end

-- The MIME type and base64 data of a `data:<kind>/...;base64,` URL, or of an MCP content
-- block ({type = "image", data = ..., mimeType = ...}) so a tool's image can be forwarded.
local function data_url(helper, kind, example, value)
  if type(value) == "table" and value.type == kind and type(value.data) == "string"
      and type(value.mimeType) == "string" and value.mimeType:sub(1, #kind + 1) == kind .. "/" then
    return value.mimeType, (value.data:gsub("%s", ""))
  end
  if type(value) == "string" then
    local mime, data = value:match("^data:(" .. kind .. "/[%w%.%+%-]+);base64,([%w%+/%s]*=*)$")
    if mime ~= nil then
      return mime, (data:gsub("%s", ""))
    end
  end
  local shown = type(value) == "string" and format("%q", value:sub(1, 40)) or type(value)
  error(format('%s: expected a data URL like "%s", got %s', helper, example, shown), 3)
end

local IMAGE_DETAILS = { auto = true, low = true, high = true, original = true }

function image(url, detail)
  local mime, data = data_url("image", "image", "data:image/png;base64,iVBOR...", url)
  if detail ~= nil and not IMAGE_DETAILS[detail] then
    error(format("image: detail must be one of auto, low, high, original, got %s", tostring(detail)), 2)
  end
  local bundle = { [mime] = data, ["text/plain"] = "<image " .. mime .. ">" }
  bundle["application/x-cellvisor-image-detail"] = detail
  host.display_bundle(bundle)
end

function audio(url)
  local mime, data = data_url("audio", "audio", "data:audio/wav;base64,UklGR...", url)
  host.display_bundle({ [mime] = data, ["text/plain"] = "<audio " .. mime .. ">" })
end

-- The request returns now with the output so far (status "running"); the cell goes on.
function yield_control()
  host.yield_control()
end

function notify(value)
  local message = as_text(value)
  if not message:find("%S") then
    error("notify: the message must not be empty", 2)
  end
  host.status({ op = "notify", message = message })
end

-- Where in `value` JSON cannot follow, as "value.a[2] is a function", or nil.
local function unstorable(value, path, seen)
  local where = path == "" and "the value" or "value" .. path
  local kind = type(value)
  if kind == "string" or kind == "boolean" then
    return nil
  elseif kind == "number" then
    if math_type(value) == "float" and (value ~= value or value == math.huge or value == -math.huge) then
      return format("%s is %s", where, tostring(value))
    end
    return nil
  elseif kind ~= "table" then
    return format("%s is a %s", where, kind == "nil" and "nil inside a table" or kind)
  end
  if seen[value] then
    return format("%s is a cycle (it contains itself)", where)
  end
  seen[value] = true
  for key, item in pairs(value) do
    local key_path
    if math_type(key) == "integer" then
      key_path = format("%s[%d]", path, key)
    elseif type(key) == "string" then
      -- JSON writes the integer key 1 as "1" (and `load` reads it back as 1): one key.
      local number = tonumber(key)
      local integer = number ~= nil and tointeger(number) or nil
      if integer ~= nil and tostring(integer) == key and rawget(value, integer) ~= nil then
        return format('%s has the key %d and the key "%s" (both "%s" in JSON)', where, integer, key, key)
      end
      key_path = path .. "." .. key
    else
      return format("%s has a %s key; JSON keys are strings or integers", where, type(key))
    end
    local found = unstorable(item, key_path, seen)
    if found ~= nil then
      return found
    end
  end
  seen[value] = nil
  return nil
end

-- store(key, value): keeps a JSON value for later cells of this session, in any language.
function store(key, value)
  if type(key) ~= "string" then
    error(format("store: key must be a string, not %s", type(key)), 2)
  end
  if value == nil then
    error("store: the value is nil, which JSON cannot hold", 2)
  end
  local problem = unstorable(value, "", {})
  if problem ~= nil then
    error(format("store: %s, which JSON cannot hold", problem), 2)
  end
  local bytes, message = host.store_save(key, value)
  if bytes == nil then
    error(message, 2)
  end
  host.status({ op = "store", key = key, bytes = bytes })
end

-- What a `load` that looks meant for Lua's own (a chunk, a function, more arguments) adds.
local LUA_LOAD = "; load(key) reads the store: Lua's own load, to compile a chunk, is lua_load"

-- load(key): the value stored under `key` in this session, or nil.
function load(key, ...)
  if type(key) ~= "string" then
    error(format("load: key must be a string, not %s%s", type(key), LUA_LOAD), 2)
  end
  if select("#", ...) > 0 then
    error(format("load: takes one key, not %d arguments%s", select("#", ...) + 1, LUA_LOAD), 2)
  end
  local found, value = host.store_load(key)
  if found == nil then
    if value:find("load: invalid key", 1, true) == 1 then
      value = value .. LUA_LOAD
    end
    error(value, 2)
  end
  host.status({ op = "load", key = key, found = found })
  return value
end

-- tools.tool_search{query, limit?}: the cell's tools ranked for `query`, as
-- {tools = {{name, description}, ...}}; only there when the cell has tools.
local function tool_search(args)
  if type(args) == "string" then
    args = { query = args }
  elseif type(args) ~= "table" then
    error("query must not be empty", 2)
  end
  if type(args.query) ~= "string" then
    error("query must not be empty", 2)
  end
  if args.limit ~= nil and type(args.limit) ~= "number" then
    error("limit must be greater than zero", 2)
  end
  local found, message = host.search_tools(args.query, args.limit)
  if found == nil then
    error(message, 2)
  end
  return found
end

local tools_index = getmetatable(tools).__index
getmetatable(tools).__index = function(self, name)
  if name == "tool_search" and host.resolve_tool(name) == nil then
    -- It exists only when the cell has tools: nil (not an error) without them.
    if #host.tool_names() > 0 then
      return tool_search
    end
    return nil
  end
  return tools_index(self, name)
end
