// The Jinja interpreter: statements, expressions, and the filters, tests, methods and globals
// that chat templates use. Semantics follow Python Jinja2 as transformers configures it.
#include "text/chat_template_eval.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "core/error.h"

namespace moex::jinja {
namespace {

// Python's ints do not overflow; a template whose arithmetic leaves int64 is refused.
int64_t AddInt(int64_t a, int64_t b, int line) {
  int64_t r = 0;
  Check(!__builtin_add_overflow(a, b, &r), "chat template line ", line, ": integer overflow");
  return r;
}
int64_t SubInt(int64_t a, int64_t b, int line) {
  int64_t r = 0;
  Check(!__builtin_sub_overflow(a, b, &r), "chat template line ", line, ": integer overflow");
  return r;
}
int64_t MulInt(int64_t a, int64_t b, int line) {
  int64_t r = 0;
  Check(!__builtin_mul_overflow(a, b, &r), "chat template line ", line, ": integer overflow");
  return r;
}

bool IsPySpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto strip_char = [&](char c) {
    return chars.is_string() ? chars.s().find(c) != std::string::npos : IsPySpace(c);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && strip_char(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip_char(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Value SplitString(const std::string& s, const Value& sep, int64_t maxsplit) {
  ValueList parts;
  if (!sep.is_string()) {
    // Python's split(): runs of whitespace, no empty parts.
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && IsPySpace(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = s.size();
        while (e > i && IsPySpace(s[e - 1])) --e;
        parts.push_back(Value::String(s.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !IsPySpace(s[j])) ++j;
      parts.push_back(Value::String(s.substr(i, j - i)));
      i = j;
    }
    return Value::List(std::move(parts));
  }
  Check(!sep.s().empty(), "chat template: split() with an empty separator");
  size_t pos = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) break;
    const size_t hit = s.find(sep.s(), pos);
    if (hit == std::string::npos) break;
    parts.push_back(Value::String(s.substr(pos, hit - pos)));
    pos = hit + sep.s().size();
  }
  parts.push_back(Value::String(s.substr(pos)));
  return Value::List(std::move(parts));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    CheckTextSize(out.size() + (hit - pos) + to.size());
    out += s.substr(pos, hit - pos) + to;
    pos = hit + from.size();
  }
  return out + s.substr(pos);
}

int64_t Length(const Value& v, int line) {
  if (v.is_string()) {
    int64_t n = 0;  // code points, as Python's len()
    for (char c : v.s()) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().size());
  Fail("chat template line ", line, ": length of a ", v.TypeName());
}

// Items to iterate over: list items, dict keys, or string characters.
ValueList Iterate(const Value& v, int line) {
  if (v.is_list()) return v.list();
  if (v.is_dict()) {
    ValueList keys;
    for (const auto& [k, _] : v.dict()) keys.push_back(Value::String(k));
    return keys;
  }
  if (v.is_string()) {
    ValueList chars;
    const std::string& s = v.s();
    for (size_t i = 0; i < s.size();) {
      size_t j = i + 1;
      while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
      chars.push_back(Value::String(s.substr(i, j - i)));
      i = j;
    }
    return chars;
  }
  if (v.is_undefined() || v.is_none()) return {};
  Fail("chat template line ", line, ": cannot iterate over a ", v.TypeName());
}

Value Arg(std::vector<Value>& args, Kwargs& kwargs, size_t index, const char* name) {
  for (auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return index < args.size() ? args[index] : Value();
}

class Renderer {
 public:
  Renderer(const ValueDict& variables, const CancelCheck& cancelled) : cancelled_(cancelled) {
    scopes_.emplace_back();
    auto& globals = scopes_.back();
    globals["raise_exception"] = Value::Func([](std::vector<Value>& args, Kwargs&) -> Value {
      Fail("chat template raised: ", args.empty() ? std::string("error") : args[0].Str());
    });
    globals["namespace"] = Value::Func([this](std::vector<Value>& args, Kwargs& kwargs) {
      ValueDict attrs;
      if (!args.empty() && args[0].is_dict()) attrs = args[0].dict();
      for (auto& [k, v] : kwargs) attrs.emplace_back(k, v);
      namespaces_.push_back(Value::Dict(std::move(attrs), true));
      return namespaces_.back();
    });
    globals["range"] = Value::Func([this](std::vector<Value>& args, Kwargs&) {
      int64_t start = 0, stop = 0, step = 1;
      if (args.size() == 1) {
        stop = args[0].i();
      } else if (args.size() >= 2) {
        start = args[0].i();
        stop = args[1].i();
        if (args.size() >= 3) step = args[2].i();
      }
      Check(step != 0, "chat template: range() step is zero");
      ValueList out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        Step();  // Each item costs a step: a loop over range(10**6) in a loop is no escape.
        out.push_back(Value::Int(i));
        Check(out.size() <= 1000000, "chat template: range() too long");
        if (__builtin_add_overflow(i, step, &i)) break;  // Past the int64 range: done.
      }
      return Value::List(std::move(out));
    });
    globals["strftime_now"] = Value::Func([](std::vector<Value>& args, Kwargs&) {
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const std::string format = args.empty() ? "%Y-%m-%d" : args[0].Str();
      const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
      return Value::String(std::string(buf, n));
    });
    for (const auto& [k, v] : variables) globals[k] = v;
  }

  // Empties this render's namespaces (see namespaces_).
  ~Renderer() {
    for (Value& ns : namespaces_) ns.dict().clear();
  }

  void Exec(const Body& body, std::string* out) {
    for (const auto& node : body) ExecNode(*node, out);
  }

 private:
  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value();
  }

  void ExecNode(const Node& n, std::string* out) {
    Step();
    switch (n.kind) {
      case Node::Kind::kText:
        *out += n.text;
        CheckTextSize(out->size());
        return;
      case Node::Kind::kOutput:
        *out += Eval(*n.expr).Str();
        CheckTextSize(out->size());
        return;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (Eval(*cond).Truthy()) {
            Exec(body, out);
            return;
          }
        }
        Exec(n.else_body, out);
        return;
      case Node::Kind::kFor:
        ExecFor(n, out);
        return;
      case Node::Kind::kSet:
        Assign(n, Eval(*n.expr));
        return;
      case Node::Kind::kSetBlock: {
        std::string captured;
        Exec(n.body, &captured);
        Assign(n, Value::String(std::move(captured)));
        return;
      }
      case Node::Kind::kMacro:
        scopes_.back()[n.targets[0]] = Macro(n);
        return;
    }
  }

  // A macro as a function: a call binds the parameters (positional, then by name, then the
  // defaults) in a new scope above the caller's and returns the body's text. The node lives
  // in the parsed template, which outlives the render and so every value of it.
  Value Macro(const Node& n) {
    return Value::Func([this, &n](std::vector<Value>& args, Kwargs& kwargs) {
      Check(macro_depth_ < kMaxMacroDepth, "chat template line ", n.line, ": macro '", n.targets[0],
            "' nested more than ", kMaxMacroDepth, " calls deep");
      Check(args.size() <= n.params.size(), "chat template line ", n.line, ": macro '",
            n.targets[0], "' takes ", n.params.size(), " arguments, given ", args.size());
      scopes_.emplace_back();
      ++macro_depth_;
      struct Leave {
        Renderer& r;
        ~Leave() {
          r.scopes_.pop_back();
          --r.macro_depth_;
        }
      } leave{*this};
      for (size_t i = 0; i < n.params.size(); ++i) {
        const std::string& name = n.params[i].first;
        const std::unique_ptr<Expr>& fallback = n.params[i].second;
        Value v;
        if (i < args.size()) {
          v = args[i];
        } else if (auto it = std::find_if(kwargs.begin(), kwargs.end(),
                                          [&](const auto& kw) { return kw.first == name; });
                   it != kwargs.end()) {
          v = it->second;
        } else if (fallback) {
          v = Eval(*fallback);
        }
        scopes_.back()[name] = std::move(v);
      }
      std::string text;
      Exec(n.body, &text);
      return Value::String(std::move(text));
    });
  }

  void Assign(const Node& n, Value v) {
    if (n.attr.empty()) {
      scopes_.back()[n.targets[0]] = std::move(v);
      return;
    }
    const Value target = Lookup(n.targets[0]);
    Check(target.is_namespace(), "chat template line ", n.line, ": cannot set ", n.targets[0], ".",
          n.attr, " (", n.targets[0], " is not a namespace)");
    target.Set(n.attr, std::move(v));
  }

  void ExecFor(const Node& n, std::string* out) {
    ValueList items = Iterate(Eval(*n.expr), n.line);
    if (n.filter) {
      ValueList kept;
      for (Value& item : items) {
        Step();
        scopes_.emplace_back();
        Bind(n, item);
        if (Eval(*n.filter).Truthy()) kept.push_back(item);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Exec(n.else_body, out);
      return;
    }
    const int64_t count = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < count; ++i) {
      Step();  // An iteration costs a step even when its body is empty.
      scopes_.emplace_back();
      Bind(n, items[i]);
      scopes_.back()["loop"] = Value::Dict({
          {"index", Value::Int(i + 1)},
          {"index0", Value::Int(i)},
          {"revindex", Value::Int(count - i)},
          {"revindex0", Value::Int(count - i - 1)},
          {"first", Value::Bool(i == 0)},
          {"last", Value::Bool(i == count - 1)},
          {"length", Value::Int(count)},
          {"previtem", i > 0 ? items[i - 1] : Value()},
          {"nextitem", i + 1 < count ? items[i + 1] : Value()},
      });
      Exec(n.body, out);
      scopes_.pop_back();
    }
  }

  void Bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = item;
      return;
    }
    Check(item.is_list() && item.list().size() == n.targets.size(), "chat template line ", n.line,
          ": cannot unpack a ", item.TypeName(), " into ", n.targets.size(), " names");
    for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back()[n.targets[k]] = item.list()[k];
  }

  // Every expression counts a step, and a string or list it gives is held to the size budget.
  Value Eval(const Expr& e) {
    Step();
    Value v = EvalExpr(e);
    if (v.is_string()) {
      CheckTextSize(v.s().size());
    } else if (v.is_list()) {
      Check(v.list().size() <= kMaxListItems, "chat template: a list of more than ",
            kMaxListItems, " items");
    }
    return v;
  }

  void Step() {
    Check(++steps_ <= kMaxSteps, "chat template: more than ", kMaxSteps,
          " evaluation steps (a loop that does not end?)");
    if (steps_ % kCancelEvery == 0 && cancelled_ && cancelled_())
      Fail("chat template: rendering cancelled");
  }

  Value EvalExpr(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        ValueList items;
        for (const auto& a : e.args) items.push_back(Eval(*a));
        return Value::List(std::move(items));
      }
      case Expr::Kind::kDict: {
        ValueDict items;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          items.emplace_back(Eval(*e.args[k]).Str(), Eval(*e.args[k + 1]));
        }
        return Value::Dict(std::move(items));
      }
      case Expr::Kind::kAttr:
        return Attr(Eval(*e.args[0]), e.name, e.line);
      case Expr::Kind::kIndex:
        return Index(Eval(*e.args[0]), Eval(*e.args[1]), e.line);
      case Expr::Kind::kSlice:
        return Slice(Eval(*e.args[0]), e.args[1] ? Eval(*e.args[1]) : Value(),
                     e.args[2] ? Eval(*e.args[2]) : Value(), e.args[3] ? Eval(*e.args[3]) : Value(),
                     e.line);
      case Expr::Kind::kCall: {
        const Value f = Eval(*e.args[0]);
        Check(f.kind() == Value::Kind::kFunction, "chat template line ", e.line, ": calling a ",
              f.TypeName(), " (undefined function or method?)");
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(Eval(*e.args[k]));
        Kwargs kwargs;
        for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, Eval(*v));
        return f.func()(args, kwargs);
      }
      case Expr::Kind::kFilter: {
        const Value v = Eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(Eval(*e.args[k]));
        Kwargs kwargs;
        for (const auto& [k, x] : e.kwargs) kwargs.emplace_back(k, Eval(*x));
        return Filter(e.name, v, args, kwargs, e.line);
      }
      case Expr::Kind::kTest: {
        const Value v = Eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(Eval(*e.args[k]));
        return Value::Bool(Test(e.name, v, args, e.line) != e.negate);
      }
      case Expr::Kind::kUnary: {
        const Value v = Eval(*e.args[0]);
        if (e.name == "not") return Value::Bool(!v.Truthy());
        Check(v.is_number(), "chat template line ", e.line, ": unary ", e.name, " on a ",
              v.TypeName());
        if (e.name == "+") return v;
        if (v.kind() != Value::Kind::kInt) return Value::Float(-v.f());
        return Value::Int(SubInt(0, v.i(), e.line));
      }
      case Expr::Kind::kBinary:
        return BinaryOp(e);
      case Expr::Kind::kTernary:
        if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Value();
    }
    return Value();
  }

  Value BinaryOp(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = Eval(*e.args[0]);
      return a.Truthy() ? Eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = Eval(*e.args[0]);
      return a.Truthy() ? a : Eval(*e.args[1]);
    }
    const Value a = Eval(*e.args[0]);
    const Value b = Eval(*e.args[1]);
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "~") return Value::String(a.Str() + b.Str());
    if (op == "in" || op == "not in") return Value::Bool(Contains(b, a, e.line) == (op == "in"));
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.is_number() && b.is_number()) {
        cmp = a.f() < b.f() ? -1 : a.f() > b.f() ? 1 : 0;
      } else if (a.is_string() && b.is_string()) {
        cmp = a.s().compare(b.s());
      } else {
        Fail("chat template line ", e.line, ": cannot compare a ", a.TypeName(), " with a ",
             b.TypeName());
      }
      if (op == "<") return Value::Bool(cmp < 0);
      if (op == ">") return Value::Bool(cmp > 0);
      if (op == "<=") return Value::Bool(cmp <= 0);
      return Value::Bool(cmp >= 0);
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::String(a.s() + b.s());
      if (a.is_list() && b.is_list()) {
        ValueList items = a.list();
        items.insert(items.end(), b.list().begin(), b.list().end());
        return Value::List(std::move(items));
      }
    }
    if (op == "*" && a.is_string() && b.kind() == Value::Kind::kInt) {
      std::string out;
      for (int64_t k = 0; k < b.i() && k < 100000; ++k) out += a.s();
      return Value::String(out);
    }
    Check(a.is_number() && b.is_number(), "chat template line ", e.line, ": cannot apply '", op,
          "' to a ", a.TypeName(), " and a ", b.TypeName());
    const bool ints = a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt;
    if (op == "+")
      return ints ? Value::Int(AddInt(a.i(), b.i(), e.line)) : Value::Float(a.f() + b.f());
    if (op == "-")
      return ints ? Value::Int(SubInt(a.i(), b.i(), e.line)) : Value::Float(a.f() - b.f());
    if (op == "*")
      return ints ? Value::Int(MulInt(a.i(), b.i(), e.line)) : Value::Float(a.f() * b.f());
    if (op == "/") {
      Check(b.f() != 0, "chat template line ", e.line, ": division by zero");
      return Value::Float(a.f() / b.f());
    }
    if (op == "//" || op == "%") {
      Check(b.f() != 0, "chat template line ", e.line, ": division by zero");
      if (ints) {
        // Python floors toward negative infinity. INT64_MIN // -1 is the one overflow.
        Check(a.i() != INT64_MIN || b.i() != -1, "chat template line ", e.line,
              ": integer overflow");
        int64_t q = a.i() / b.i();
        if ((a.i() % b.i() != 0) && ((a.i() < 0) != (b.i() < 0))) --q;
        return op == "//" ? Value::Int(q) : Value::Int(a.i() - q * b.i());
      }
      const double q = std::floor(a.f() / b.f());
      return op == "//" ? Value::Float(q) : Value::Float(a.f() - q * b.f());
    }
    if (op == "**") {
      if (ints && b.i() >= 0) {
        int64_t p = 1;
        for (int64_t k = 0; k < b.i() && k < 64; ++k) p = MulInt(p, a.i(), e.line);
        return Value::Int(p);
      }
      return Value::Float(std::pow(a.f(), b.f()));
    }
    Fail("chat template line ", e.line, ": unknown operator ", op);
  }

  bool Contains(const Value& container, const Value& item, int line) {
    if (container.is_string()) {
      Check(item.is_string(), "chat template line ", line, ": 'in <string>' needs a string");
      return container.s().find(item.s()) != std::string::npos;
    }
    if (container.is_list()) {
      for (const Value& v : container.list()) {
        if (Equal(v, item)) return true;
      }
      return false;
    }
    if (container.is_dict()) return !container.Get(item.Str()).is_undefined();
    if (container.is_undefined()) return false;
    Fail("chat template line ", line, ": 'in' on a ", container.TypeName());
  }

  Value Index(const Value& obj, const Value& key, int line) {
    if (obj.is_dict()) {
      const Value v = obj.Get(key.Str());
      return v.is_undefined() && key.is_string() ? Attr(obj, key.s(), line) : v;
    }
    if (obj.is_list() || obj.is_string()) {
      Check(key.kind() == Value::Kind::kInt, "chat template line ", line, ": index is a ",
            key.TypeName());
      const ValueList items = obj.is_list() ? obj.list() : Iterate(obj, line);
      int64_t i = key.i();
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
      return items[i];
    }
    return Value();
  }

  Value Slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v,
              int line) {
    Check(obj.is_list() || obj.is_string(), "chat template line ", line, ": slicing a ",
          obj.TypeName());
    const ValueList items = obj.is_list() ? obj.list() : Iterate(obj, line);
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t step = step_v.kind() == Value::Kind::kInt ? step_v.i() : 1;
    Check(step != 0, "chat template line ", line, ": slice step is zero");
    auto clamp = [&](const Value& v, int64_t dflt) {
      if (v.kind() != Value::Kind::kInt) return dflt;
      int64_t i = v.i();
      if (i < 0) i += n;
      if (step > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = clamp(start_v, step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(stop_v, step > 0 ? n : -1);
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(items[i]);
    if (obj.is_list()) return Value::List(std::move(out));
    std::string s;
    for (const Value& v : out) s += v.s();
    return Value::String(s);
  }

  Value Attr(const Value& obj, const std::string& name, int line) {
    if (obj.is_string()) return StringMethod(obj, name, line);
    if (obj.is_dict()) {
      if (!obj.is_namespace() &&
          (name == "items" || name == "keys" || name == "values" || name == "get")) {
        return DictMethod(obj, name);
      }
      return obj.Get(name);
    }
    if (obj.is_list() && name == "append") {
      return Value::Func([obj](std::vector<Value>& args, Kwargs&) {
        for (Value& a : args) obj.list().push_back(a);
        return Value();
      });
    }
    return Value();
  }

  Value DictMethod(const Value& obj, const std::string& name) {
    return Value::Func([obj, name](std::vector<Value>& args, Kwargs&) {
      if (name == "get") {
        const Value v = args.empty() ? Value() : obj.Get(args[0].Str());
        return v.is_undefined() ? (args.size() > 1 ? args[1] : Value::None()) : v;
      }
      ValueList out;
      for (const auto& [k, v] : obj.dict()) {
        if (name == "items") {
          out.push_back(Value::List({Value::String(k), v}));
        } else if (name == "keys") {
          out.push_back(Value::String(k));
        } else {
          out.push_back(v);
        }
      }
      return Value::List(std::move(out));
    });
  }

  Value StringMethod(const Value& obj, const std::string& name, int line) {
    const std::string s = obj.s();
    return Value::Func([s, name, line](std::vector<Value>& args, Kwargs& kwargs) -> Value {
      if (name == "startswith" || name == "endswith") {
        const Value arg = Arg(args, kwargs, 0, "prefix");
        ValueList options = arg.is_list() ? arg.list() : ValueList{arg};
        for (const Value& o : options) {
          const std::string& p = o.Str();
          const bool hit =
              name == "startswith"
                  ? s.compare(0, p.size(), p) == 0
                  : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
          if (hit) return Value::Bool(true);
        }
        return Value::Bool(false);
      }
      if (name == "strip")
        return Value::String(Strip(s, Arg(args, kwargs, 0, "chars"), true, true));
      if (name == "lstrip") {
        return Value::String(Strip(s, Arg(args, kwargs, 0, "chars"), true, false));
      }
      if (name == "rstrip") {
        return Value::String(Strip(s, Arg(args, kwargs, 0, "chars"), false, true));
      }
      if (name == "split") {
        const Value max = Arg(args, kwargs, 1, "maxsplit");
        return SplitString(s, Arg(args, kwargs, 0, "sep"),
                           max.kind() == Value::Kind::kInt ? max.i() : -1);
      }
      if (name == "upper") return Value::String(Upper(s));
      if (name == "lower") return Value::String(Lower(s));
      if (name == "replace") {
        return Value::String(
            Replace(s, Arg(args, kwargs, 0, "old").Str(), Arg(args, kwargs, 1, "new").Str()));
      }
      if (name == "find") {
        const size_t hit = s.find(Arg(args, kwargs, 0, "sub").Str());
        return Value::Int(hit == std::string::npos ? -1 : static_cast<int64_t>(hit));
      }
      if (name == "count") {
        const std::string sub = Arg(args, kwargs, 0, "sub").Str();
        int64_t n = 0;
        for (size_t p = 0; !sub.empty() && (p = s.find(sub, p)) != std::string::npos;
             p += sub.size()) {
          ++n;
        }
        return Value::Int(n);
      }
      if (name == "join") {
        std::string out;
        const Value items = Arg(args, kwargs, 0, "iterable");
        if (items.is_list()) {
          for (size_t k = 0; k < items.list().size(); ++k) {
            out += (k ? s : "") + items.list()[k].Str();
            CheckTextSize(out.size());
          }
        }
        return Value::String(out);
      }
      if (name == "title" || name == "capitalize") {
        std::string out = name == "capitalize" ? Lower(s) : s;
        bool start = true;
        for (char& c : out) {
          if (start)
            c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          else if (name == "title")
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          start = name == "title" ? !std::isalpha(static_cast<unsigned char>(c)) : false;
        }
        return Value::String(out);
      }
      Fail("chat template line ", line, ": unsupported string method ", name, "()");
    });
  }

  Value Filter(const std::string& name, const Value& v, std::vector<Value>& args, Kwargs& kwargs,
               int line) {
    if (name == "length" || name == "count") return Value::Int(Length(v, line));
    if (name == "tojson") {
      const Value indent = Arg(args, kwargs, 0, "indent");
      const int64_t width = indent.kind() == Value::Kind::kInt ? indent.i() : -1;
      Check(width <= 64, "chat template line ", line, ": tojson indent ", width,
            " is more than 64");
      return Value::String(v.ToJson(static_cast<int>(width)));
    }
    if (name == "trim")
      return Value::String(Strip(v.Str(), Arg(args, kwargs, 0, "chars"), true, true));
    if (name == "upper") return Value::String(Upper(v.Str()));
    if (name == "lower") return Value::String(Lower(v.Str()));
    if (name == "string") return Value::String(v.Str());
    if (name == "safe" || name == "e" || name == "escape") return v;
    if (name == "default" || name == "d") {
      const bool boolean = Arg(args, kwargs, 1, "boolean").Truthy();
      const bool use_default = v.is_undefined() || (boolean && !v.Truthy());
      return use_default ? Arg(args, kwargs, 0, "default_value") : v;
    }
    if (name == "join") {
      const std::string sep = Arg(args, kwargs, 0, "d").Str();
      std::string out;
      const ValueList items = Iterate(v, line);
      for (size_t k = 0; k < items.size(); ++k) out += (k ? sep : "") + items[k].Str();
      return Value::String(out);
    }
    if (name == "first" || name == "last") {
      const ValueList items = Iterate(v, line);
      if (items.empty()) return Value();
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value::List(Iterate(v, line));
    if (name == "reverse") {
      ValueList items = Iterate(v, line);
      std::reverse(items.begin(), items.end());
      if (v.is_string()) {
        std::string s;
        for (const Value& c : items) s += c.s();
        return Value::String(s);
      }
      return Value::List(std::move(items));
    }
    if (name == "replace") {
      return Value::String(
          Replace(v.Str(), Arg(args, kwargs, 0, "old").Str(), Arg(args, kwargs, 1, "new").Str()));
    }
    if (name == "int") {
      if (v.is_number()) {
        if (v.kind() == Value::Kind::kInt) return v;
        // Python's int() of a float has no range limit; outside int64 it is an error here.
        Check(std::isfinite(v.f()) && std::fabs(v.f()) < 9.2e18, "chat template: int() of ", v.f(),
              " is outside the 64-bit range");
        return Value::Int(static_cast<int64_t>(v.f()));
      }
      try {
        return Value::Int(std::stoll(v.Str()));
      } catch (...) {
        return Value::Int(0);
      }
    }
    if (name == "abs" && v.is_number()) {
      if (v.kind() == Value::Kind::kInt)
        Check(v.i() != INT64_MIN, "chat template: abs() of ", v.i(), " overflows");
      return v.kind() == Value::Kind::kInt ? Value::Int(std::llabs(v.i()))
                                           : Value::Float(std::fabs(v.f()));
    }
    if (name == "items" && v.is_dict()) {
      std::vector<Value> none;
      Kwargs no_kwargs;
      return DictMethod(v, "items").func()(none, no_kwargs);
    }
    if (name == "capitalize" || name == "title") {
      std::vector<Value> none;
      Kwargs no_kwargs;
      return StringMethod(Value::String(v.Str()), name, line).func()(none, no_kwargs);
    }
    if (name == "map") {
      const Value attribute = Arg(args, kwargs, 99, "attribute");
      ValueList out;
      for (const Value& item : Iterate(v, line)) {
        if (attribute.is_string()) {
          out.push_back(Attr(item, attribute.s(), line));
        } else {
          Check(!args.empty(), "chat template line ", line, ": map() needs a filter or attribute");
          std::vector<Value> rest(args.begin() + 1, args.end());
          Kwargs none;
          out.push_back(Filter(args[0].Str(), item, rest, none, line));
        }
      }
      return Value::List(std::move(out));
    }
    if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
      const bool attr = name == "selectattr" || name == "rejectattr";
      const bool keep = name == "selectattr" || name == "select";
      ValueList out;
      for (const Value& item : Iterate(v, line)) {
        size_t next = 0;
        Value subject = item;
        if (attr) {
          Check(!args.empty(), "chat template line ", line, ": ", name, "() needs an attribute");
          subject = Attr(item, args[0].Str(), line);
          next = 1;
        }
        bool ok;
        if (next < args.size()) {
          std::vector<Value> test_args(args.begin() + next + 1, args.end());
          ok = Test(args[next].Str(), subject, test_args, line);
        } else {
          ok = subject.Truthy();
        }
        if (ok == keep) out.push_back(item);
      }
      return Value::List(std::move(out));
    }
    Fail("chat template line ", line, ": unsupported filter '", name, "'");
  }

  bool Test(const std::string& name, const Value& v, const std::vector<Value>& args, int line) {
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind() == Value::Kind::kInt;
    if (name == "float") return v.kind() == Value::Kind::kFloat;
    if (name == "boolean") return v.kind() == Value::Kind::kBool;
    if (name == "true") return v.kind() == Value::Kind::kBool && v.b();
    if (name == "false") return v.kind() == Value::Kind::kBool && !v.b();
    if (name == "mapping") return v.is_dict();
    if (name == "sequence" || name == "iterable")
      return v.is_list() || v.is_string() || v.is_dict();
    if (name == "callable") return v.kind() == Value::Kind::kFunction;
    if (name == "even" || name == "odd") {
      Check(v.kind() == Value::Kind::kInt, "chat template line ", line, ": '", name, "' test on a ",
            v.TypeName());
      return (v.i() % 2 == 0) == (name == "even");
    }
    Check(!args.empty(), "chat template line ", line, ": test '", name, "' needs an argument");
    if (name == "divisibleby") return args[0].i() != 0 && v.i() % args[0].i() == 0;
    if (name == "eq" || name == "equalto" || name == "==" || name == "sameas") {
      return Equal(v, args[0]);
    }
    if (name == "ne" || name == "!=") return !Equal(v, args[0]);
    if (name == "in") return Contains(args[0], v, line);
    if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
      Check(v.is_number() && args[0].is_number(), "chat template line ", line, ": '", name,
            "' needs numbers");
      if (name == "lt") return v.f() < args[0].f();
      if (name == "gt") return v.f() > args[0].f();
      if (name == "le") return v.f() <= args[0].f();
      return v.f() >= args[0].f();
    }
    Fail("chat template line ", line, ": unsupported test '", name, "'");
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
  // Every namespace() of this render. Values share dicts by reference counting, so a
  // namespace stored in itself (`{% set ns.n = ns %}`) would never be freed: emptying them
  // when the render ends breaks such cycles (no value outlives the render).
  std::vector<Value> namespaces_;
  // Budgets beside kMaxTemplateText, so a render ends in bounded time (a real template over
  // a long conversation takes a few thousand steps; 4 million take well under a second).
  static constexpr uint64_t kMaxSteps = 4'000'000;
  static constexpr size_t kMaxListItems = 1'000'000;
  static constexpr uint64_t kCancelEvery = 4096;  // About a millisecond of evaluation.
  uint64_t steps_ = 0;
  static constexpr int kMaxMacroDepth = 64;  // Calls of macros inside macros (recursion).
  int macro_depth_ = 0;
  const CancelCheck& cancelled_;
};

}  // namespace

std::string Render(const Body& body, const ValueDict& variables, const CancelCheck& cancelled) {
  Renderer r(variables, cancelled);
  std::string out;
  r.Exec(body, &out);
  return out;
}

}  // namespace moex::jinja
