// Interpreter of the chat-template Jinja engine: statements write into an output string,
// expressions evaluate to Values. Scoping follows @huggingface/jinja: a `for` loop and a macro
// call open a scope, `if` does not; `set` writes the innermost scope; namespaces are shared.
#include "server/jinja/interp.h"

#include <charconv>
#include <cmath>
#include <deque>
#include <unordered_map>

#include "kernels/common.h"
#include "server/jinja/builtins.h"
#include "server/jinja/operators.h"

namespace tandem::jinja {
namespace {

struct Scope {
  Scope* parent = nullptr;
  std::unordered_map<std::string, Value> vars;
  bool captured = false;  // a macro or caller closure may reach this scope
};

enum class Flow : uint8_t { kNormal, kBreak, kContinue };

[[noreturn]] void fail_at(int line, const std::string& msg) {
  TANDEM_FAIL(kInvalidArgument, "chat template error at line ", line, ": ", msg);
}

bool is_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

class Interpreter {
 public:
  Interpreter(const Object& context, const RenderLimits& limits) : limits_(limits) {
    root_ = new_scope(nullptr);
    Object globals;
    add_globals(globals, static_cast<size_t>(limits.max_steps));
    for (auto& [k, v] : globals.items) root_->vars[k] = std::move(v);
    for (const auto& [k, v] : context.items) root_->vars[k] = v;
  }

  std::string run(const std::vector<NodePtr>& program) {
    std::string out;
    exec_block(program, root_, out);
    return out;
  }

 private:
  Scope* new_scope(Scope* parent) {
    scopes_.emplace_back();
    scopes_.back().parent = parent;
    return &scopes_.back();
  }

  // A closure keeps `s` and its ancestors alive until the end of the render.
  static void capture(Scope* s) {
    for (; s != nullptr && !s->captured; s = s->parent) s->captured = true;
  }

  // Frees the scopes made since `mark` (a finished loop or macro call) unless a closure may
  // reach one, so long loops of macro calls do not pile up scopes.
  void release(size_t mark) {
    for (size_t i = mark; i < scopes_.size(); ++i) {
      if (scopes_[i].captured) return;
    }
    scopes_.resize(mark);
  }

  void step() {
    if (++steps_ > limits_.max_steps) throw JinjaError("too many loop iterations or macro calls");
  }

  static void append(std::string& out, const std::string& s) {
    check_size(out.size() + s.size());
    out += s;
  }

  Flow exec_block(const std::vector<NodePtr>& body, Scope* scope, std::string& out) {
    for (const NodePtr& n : body) {
      const Flow f = exec(*n, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Node& n, Scope* scope, std::string& out) {
    try {
      return exec_inner(n, scope, out);
    } catch (const JinjaError& e) {
      fail_at(n.line, e.what());
    }
  }

  Flow exec_inner(const Node& n, Scope* scope, std::string& out) {
    switch (n.kind) {
      case NodeKind::kText:
        append(out, n.name);
        return Flow::kNormal;
      case NodeKind::kOutput:
        append(out, to_output_string(eval(*n.a, scope)));
        return Flow::kNormal;
      case NodeKind::kIf:
        return exec_block(truthy(eval(*n.a, scope)) ? n.body : n.else_body, scope, out);
      case NodeKind::kFor:
        return exec_for(n, scope, out);
      case NodeKind::kSet:
        assign(*n.a, eval(*n.b, scope), scope);
        return Flow::kNormal;
      case NodeKind::kSetBlock: {
        std::string text;
        exec_block(n.body, scope, text);
        assign(*n.a, Value::from_string(std::move(text)), scope);
        return Flow::kNormal;
      }
      case NodeKind::kMacro: {
        const Node* node = &n;
        capture(scope);
        scope->vars[n.name] = Value::from_function(
            [this, node, scope](CallArgs& args) { return call_body(*node, scope, args); });
        return Flow::kNormal;
      }
      case NodeKind::kCallBlock: {
        const Node* node = &n;
        capture(scope);
        Value caller = Value::from_function(
            [this, node, scope](CallArgs& args) { return call_body(*node, scope, args); });
        const Node& call = *n.a;
        const Value callee = eval(*call.a, scope);
        CallArgs args = eval_args(call.args, scope);
        args.keyword.emplace_back("caller", std::move(caller));
        if (!callee.is_function()) throw JinjaError("'" + call.a->name + "' is not a macro");
        append(out, to_output_string(callee.function()(args)));
        return Flow::kNormal;
      }
      case NodeKind::kFilterBlock: {
        std::string text;
        exec_block(n.body, scope, text);
        CallArgs args = eval_args(n.args, scope);
        append(out, to_output_string(apply_filter(n.name, Value::from_string(text), args)));
        return Flow::kNormal;
      }
      case NodeKind::kBreak:
        return Flow::kBreak;
      case NodeKind::kContinue:
        return Flow::kContinue;
      default:
        throw JinjaError("expression used as a statement");
    }
  }

  // Binds a loop target (a name or a tuple of names) to one item.
  static void bind_target(const Node& target, const Value& item, Scope* scope) {
    if (target.kind == NodeKind::kName) {
      scope->vars[target.name] = item;
      return;
    }
    if (!item.is_array()) {
      throw JinjaError(std::string("cannot unpack a ") + item.type_name() + " into " +
                       std::to_string(target.items.size()) + " names");
    }
    if (item.array().size() != target.items.size()) {
      throw JinjaError(std::string("too ") +
                       (item.array().size() < target.items.size() ? "few" : "many") +
                       " items to unpack");
    }
    for (size_t i = 0; i < target.items.size(); ++i) {
      scope->vars[target.items[i]->name] = item.array()[i];
    }
  }

  Flow exec_for(const Node& n, Scope* scope, std::string& out) {
    const size_t mark = scopes_.size();
    Scope* loop_scope = new_scope(scope);
    Array items = iterate(eval(*n.b, loop_scope));
    if (n.c) {
      Scope* test_scope = new_scope(loop_scope);
      Array kept;
      for (Value& item : items) {
        step();
        bind_target(*n.a, item, test_scope);
        if (truthy(eval(*n.c, test_scope))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      step();
      Object loop;
      loop.items.reserve(10);
      loop.items.emplace_back("index", Value::from_int(i + 1));
      loop.items.emplace_back("index0", Value::from_int(i));
      loop.items.emplace_back("revindex", Value::from_int(len - i));
      loop.items.emplace_back("revindex0", Value::from_int(len - i - 1));
      loop.items.emplace_back("first", Value::from_bool(i == 0));
      loop.items.emplace_back("last", Value::from_bool(i == len - 1));
      loop.items.emplace_back("length", Value::from_int(len));
      loop.items.emplace_back("previtem", i > 0 ? items[i - 1] : Value());
      loop.items.emplace_back("nextitem", i + 1 < len ? items[i + 1] : Value());
      loop.items.emplace_back("cycle", Value::from_function([i](CallArgs& a) {
                                if (a.positional.empty()) throw JinjaError("no items for cycling");
                                return a.positional[static_cast<size_t>(i) % a.positional.size()];
                              }));
      loop_scope->vars["loop"] = Value::from_object(std::move(loop));
      bind_target(*n.a, items[i], loop_scope);
      if (exec_block(n.body, loop_scope, out) == Flow::kBreak) break;
    }
    if (items.empty()) exec_block(n.else_body, loop_scope, out);
    release(mark);
    return Flow::kNormal;
  }

  void assign(const Node& target, const Value& v, Scope* scope) {
    switch (target.kind) {
      case NodeKind::kName:
        scope->vars[target.name] = v;
        return;
      case NodeKind::kTuple:
        bind_target(target, v, scope);
        return;
      case NodeKind::kAttr: {
        const Value obj = eval(*target.a, scope);
        if (!obj.is_namespace()) throw JinjaError("cannot assign an attribute of a non-namespace");
        obj.object_mut().set(target.name, v);
        return;
      }
      default:
        throw JinjaError("invalid assignment target");
    }
  }

  // A macro (node kMacro) or a call block's caller (node kCallBlock) called with args.
  Value call_body(const Node& node, Scope* def_scope, CallArgs& args) {
    if (depth_ >= limits_.max_call_depth) throw JinjaError("macro calls nested too deeply");
    step();
    ++depth_;
    struct Exit {
      int* d;
      ~Exit() { --*d; }
    } exit{&depth_};
    const size_t mark = scopes_.size();
    Scope* s = new_scope(def_scope);
    const std::vector<Arg>& params = node.args;
    std::vector<bool> bound(params.size(), false);
    for (size_t i = 0; i < params.size() && i < args.positional.size(); ++i) {
      s->vars[params[i].name] = args.positional[i];
      bound[i] = true;
    }
    Array varargs;
    for (size_t i = params.size(); i < args.positional.size(); ++i) {
      varargs.push_back(args.positional[i]);
    }
    Object kwargs;
    for (auto& [k, v] : args.keyword) {
      bool matched = false;
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].name != k) continue;
        if (bound[i]) throw JinjaError("got multiple values for argument '" + k + "'");
        s->vars[k] = v;
        bound[i] = matched = true;
      }
      if (!matched && k == "caller") {
        s->vars[k] = v;
      } else if (!matched) {
        kwargs.set(k, v);
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (!bound[i]) s->vars[params[i].name] = Value();
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (!bound[i] && params[i].value) s->vars[params[i].name] = eval(*params[i].value, s);
    }
    s->vars["varargs"] = Value::from_array(std::move(varargs));
    s->vars["kwargs"] = Value::from_object(std::move(kwargs));
    std::string out;
    exec_block(node.body, s, out);
    release(mark);
    return Value::from_string(std::move(out));
  }

  CallArgs eval_args(const std::vector<Arg>& args, Scope* scope) {
    CallArgs out;
    for (const Arg& a : args) {
      Value v = eval(*a.value, scope);
      if (a.spread == 1) {
        for (Value& x : iterate(v)) out.positional.push_back(std::move(x));
      } else if (a.spread == 2) {
        if (!v.is_attr_container()) throw JinjaError("argument after ** must be a mapping");
        for (const auto& kv : v.object().items) out.keyword.push_back(kv);
      } else if (!a.name.empty()) {
        out.keyword.emplace_back(a.name, std::move(v));
      } else {
        out.positional.push_back(std::move(v));
      }
    }
    return out;
  }

  Value lookup(const std::string& name, Scope* scope) const {
    for (Scope* s = scope; s != nullptr; s = s->parent) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    return Value();
  }

  Value eval(const Node& n, Scope* scope) {
    try {
      return eval_inner(n, scope);
    } catch (const JinjaError& e) {
      fail_at(n.line, e.what());
    }
  }

  Value eval_inner(const Node& n, Scope* scope) {
    switch (n.kind) {
      case NodeKind::kLiteral:
        return n.literal;
      case NodeKind::kName:
        return lookup(n.name, scope);
      case NodeKind::kList:
      case NodeKind::kTuple: {
        Array a;
        a.reserve(n.items.size());
        for (const NodePtr& item : n.items) a.push_back(eval(*item, scope));
        return Value::from_array(std::move(a));
      }
      case NodeKind::kDict: {
        Object o;
        for (size_t i = 0; i + 1 < n.items.size(); i += 2) {
          const Value key = eval(*n.items[i], scope);
          if (!key.is_string()) throw JinjaError("dict keys must be strings");
          o.set(key.str(), eval(*n.items[i + 1], scope));
        }
        return Value::from_object(std::move(o));
      }
      case NodeKind::kAttr: {
        const Value obj = eval(*n.a, scope);
        if (is_digits(n.name) && (obj.is_array() || obj.is_string())) {
          int64_t i = 0;
          const auto res = std::from_chars(n.name.data(), n.name.data() + n.name.size(), i);
          return res.ec == std::errc() ? get_item(obj, Value::from_int(i)) : Value();
        }
        return get_attr(obj, n.name);
      }
      case NodeKind::kIndex:
        return get_item(eval(*n.a, scope), eval(*n.b, scope));
      case NodeKind::kSlice: {
        const Value obj = eval(*n.a, scope);
        return slice_value(obj, n.b ? eval(*n.b, scope) : Value(),
                           n.c ? eval(*n.c, scope) : Value(), n.d ? eval(*n.d, scope) : Value());
      }
      case NodeKind::kCall: {
        const Value callee = eval(*n.a, scope);
        CallArgs args = eval_args(n.args, scope);
        if (!callee.is_function()) {
          const std::string what = n.a->kind == NodeKind::kName   ? "'" + n.a->name + "'"
                                   : n.a->kind == NodeKind::kAttr ? "'" + n.a->name + "'"
                                                                  : "the expression";
          throw JinjaError(what + " is " + (callee.is_undefined() ? "undefined" : "not callable"));
        }
        return callee.function()(args);
      }
      case NodeKind::kFilter: {
        const Value operand = eval(*n.a, scope);
        CallArgs args = eval_args(n.args, scope);
        return apply_filter(n.name, operand, args);
      }
      case NodeKind::kTest: {
        const Value operand = eval(*n.a, scope);
        const CallArgs args = eval_args(n.args, scope);
        return Value::from_bool(apply_test(n.name, operand, args) != n.negate);
      }
      case NodeKind::kUnary: {
        const Value v = eval(*n.a, scope);
        if (n.name == "not") return Value::from_bool(!truthy(v));
        if (v.is_float()) return Value::from_float(n.name == "-" ? -v.as_float() : v.as_float());
        if (v.is_int() || v.is_bool()) {
          const int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
          if (n.name == "+") return Value::from_int(i);
          if (i == INT64_MIN) return Value::from_float(-static_cast<double>(i));
          return Value::from_int(-i);
        }
        throw JinjaError("bad operand type for unary " + n.name + ": " + v.type_name());
      }
      case NodeKind::kBinary: {
        if (n.name == "and" || n.name == "or") {
          Value l = eval(*n.a, scope);
          if (truthy(l) == (n.name == "or")) return l;
          return eval(*n.b, scope);
        }
        const Value l = eval(*n.a, scope);
        const Value r = eval(*n.b, scope);
        return binary_op(n.name, l, r);
      }
      case NodeKind::kTernary:
        return truthy(eval(*n.a, scope)) ? eval(*n.b, scope) : eval(*n.c, scope);
      case NodeKind::kSelect:
        return truthy(eval(*n.a, scope)) ? eval(*n.b, scope) : Value();
      default:
        throw JinjaError("statement used as an expression");
    }
  }

  RenderLimits limits_;
  std::deque<Scope> scopes_;  // every scope of this render; freed together at the end
  Scope* root_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string render(const std::vector<NodePtr>& program, const Object& context,
                   const RenderLimits& limits) {
  const RenderArena arena;  // outlives the interpreter and its scopes
  return Interpreter(context, limits).run(program);
}

}  // namespace tandem::jinja
