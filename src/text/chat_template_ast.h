// Syntax tree of the Jinja subset (see chat_template.h for what the subset covers).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/chat_template_value.h"

namespace moex::jinja {

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args
    kDict,     // kwargs (string keys) -- keys are args[i] for non-literal keys
    kAttr,     // args[0].name
    kIndex,    // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts are absent)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // name applied to args[0], extra args args[1..], kwargs
    kTest,     // args[0] is [not] name(args[1..]); negate
    kUnary,    // op args[0]: "not", "-", "+"
    kBinary,   // args[0] op args[1]
    kTernary,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  Value value;
  std::string name;  // name, attribute, filter, test or operator
  bool negate = false;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  int line = 0;
  int height = 1;  // Levels of the tree below and including this node (bounded by the parser).
};

// Parser limits: evaluation and destruction recurse over the tree, so a hostile template
// gets an error instead of a stack overflow. Real templates stay far below both.
constexpr int kMaxExprHeight = 256;      // Operator chains and nesting inside one tag.
constexpr int kMaxStatementNesting = 64;  // Nested if/for/set blocks.

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro };
  Kind kind = Kind::kText;
  std::string text;            // kText
  std::unique_ptr<Expr> expr;  // kOutput, kSet value, kFor iterable
  std::vector<std::pair<std::unique_ptr<Expr>, Body>> branches;  // kIf: condition, body
  Body body;                                                     // kFor, kSetBlock, kMacro
  Body else_body;                                                // kIf, kFor
  std::vector<std::string> targets;  // kFor loop variables, kSet name, kMacro name
  // kMacro: the parameters in order, each with its default (null: none).
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> params;
  std::string attr;                                              // kSet: ns.attr
  std::unique_ptr<Expr> filter;                                  // kFor: "if" condition
  int line = 0;
};

// Parses template source; throws moex::Error naming the line of unsupported or bad syntax.
Body Parse(const std::string& source);

}  // namespace moex::jinja
