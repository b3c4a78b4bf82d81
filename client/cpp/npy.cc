// .npy reading and writing: the fixed preamble (magic, version, header length), a small parser for
// the header's Python dict literal ({'descr': ..., 'fortran_order': ..., 'shape': (...)}), and the
// data length checks. Every rejection names what was wrong, for the CLI to print as is.
#include "client/cpp/npy.h"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace matserve::client {
namespace {

static_assert(std::endian::native == std::endian::little,
              ".npy data is read in place as little-endian; a big-endian host needs byte swaps");

constexpr std::string_view kMagic = "\x93NUMPY";

absl::Status invalid(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(".npy: ", std::string(what)));
}

std::string quote(std::string_view s) {
  return absl::StrCat("'", std::string(s), "'");
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// One value of the header dict: a string, a bool, or a tuple of integers.
struct HeaderValue {
  enum class Kind { kString, kBool, kTuple } kind = Kind::kString;
  std::string text;
  bool flag = false;
  std::vector<std::int64_t> ints;
};

// Recursive-descent parser for the header, which NumPy writes as a Python dict literal.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  absl::Status parse(std::optional<HeaderValue>& descr, std::optional<HeaderValue>& fortran,
                     std::optional<HeaderValue>& shape) {
    skip_space();
    if (!consume('{')) return error("header is not a dict (expected '{')");
    while (true) {
      skip_space();
      if (consume('}')) break;
      std::string key;
      if (absl::Status s = parse_string(key); !s.ok()) return s;
      skip_space();
      if (!consume(':')) return error(absl::StrCat("expected ':' after key ", quote(key)));
      std::optional<HeaderValue>* slot = nullptr;
      if (key == "descr") {
        slot = &descr;
      } else if (key == "fortran_order") {
        slot = &fortran;
      } else if (key == "shape") {
        slot = &shape;
      } else {
        return error(absl::StrCat("unexpected header key ", quote(key),
                                  " (expected 'descr', 'fortran_order', 'shape')"));
      }
      if (slot->has_value()) return error(absl::StrCat("duplicate header key ", quote(key)));
      skip_space();
      if (key == "descr" && peek() == '[') {
        return invalid("structured dtype (descr is a list of fields) is not supported");
      }
      HeaderValue value;
      if (absl::Status s = parse_value(value); !s.ok()) return s;
      *slot = std::move(value);
      skip_space();
      if (consume(',')) continue;
      skip_space();
      if (consume('}')) break;
      return error("expected ',' or '}' in the header dict");
    }
    skip_space();
    if (pos_ != text_.size()) return error("unexpected text after the header dict");
    return absl::OkStatus();
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  absl::Status error(std::string_view what) const {
    return invalid(absl::StrCat("malformed header at byte ", pos_, ": ", std::string(what)));
  }

  absl::Status parse_string(std::string& out) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') return error("expected a quoted string");
    ++pos_;
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return error("unterminated string");
    out = std::string(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return absl::OkStatus();
  }

  absl::Status parse_int(std::int64_t& out) {
    const std::size_t start = pos_;
    if (peek() == '-') return error("negative dimension in shape");
    std::int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      const int d = text_[pos_++] - '0';
      if (v > (std::numeric_limits<std::int64_t>::max() - d) / 10) {
        return error("dimension overflows int64");
      }
      v = v * 10 + d;
    }
    if (pos_ == start) return error("expected an integer in shape");
    consume('L');  // Python 2 long suffix, written by very old NumPy
    out = v;
    return absl::OkStatus();
  }

  absl::Status parse_value(HeaderValue& out) {
    const char c = peek();
    if (c == '\'' || c == '"') {
      out.kind = HeaderValue::Kind::kString;
      return parse_string(out.text);
    }
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      out.kind = HeaderValue::Kind::kBool;
      out.flag = true;
      return absl::OkStatus();
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      out.kind = HeaderValue::Kind::kBool;
      out.flag = false;
      return absl::OkStatus();
    }
    if (c == '(') {
      ++pos_;
      out.kind = HeaderValue::Kind::kTuple;
      while (true) {
        skip_space();
        if (consume(')')) return absl::OkStatus();
        std::int64_t v = 0;
        if (absl::Status s = parse_int(v); !s.ok()) return s;
        out.ints.push_back(v);
        skip_space();
        if (consume(',')) continue;
        if (consume(')')) return absl::OkStatus();
        return error("expected ',' or ')' in shape");
      }
    }
    return error("expected a string, True, False or a tuple");
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

absl::StatusOr<DType> DTypeFromDescr(std::string_view descr, bool bf16) {
  if (descr.size() >= 2 && descr[0] == '>') {
    return invalid(absl::StrCat("big-endian dtype ", quote(descr),
                                " is not supported; save it little-endian (a.astype('<",
                                std::string(descr.substr(1)), "'))"));
  }
  if (descr == "O" || descr == "|O" || descr == "<O" || descr == "=O") {
    return invalid(absl::StrCat("object dtype ", quote(descr),
                                " holds Python objects, not numbers; convert with "
                                "a.astype(np.float32) first"));
  }
  // '=' is native order, which this (little-endian) host shares with '<'.
  std::string_view body = descr;
  if (!body.empty() && (body[0] == '<' || body[0] == '=' || body[0] == '|')) body.remove_prefix(1);
  const bool pipe = !descr.empty() && descr[0] == '|';
  if (!pipe) {
    if (body == "f8") return DType::kF64;
    if (body == "f4") return DType::kF32;
    if (body == "f2") return DType::kF16;
  }
  if (body == "u2" || body == "V2") {
    if (bf16) return DType::kBF16;
    return invalid(absl::StrCat("dtype ", quote(descr),
                                " is not a floating-point type; if it holds bfloat16 bit patterns "
                                "read it as bf16 (CLI: --dtype bf16; C++: NpyReadOptions::bf16)"));
  }
  return invalid(absl::StrCat("unsupported dtype ", quote(descr),
                              " (supported: '<f8', '<f4', '<f2', and bfloat16 as '<u2' or '<V2')"));
}

std::uint32_t load_le(std::string_view bytes, std::size_t offset, int n) {
  std::uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[offset + i]);
  return v;
}

absl::Status errno_status(std::string_view what, const std::string& path, int err) {
  std::string msg = absl::StrCat(std::string(what), " '", path, "': ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

std::string_view npy_descr(DType dtype) {
  switch (dtype) {
    case DType::kF64: return "<f8";
    case DType::kF32: return "<f4";
    case DType::kF16: return "<f2";
    case DType::kBF16: return "<u2";
    default: break;  // kernel-only types (fp8) have no .npy mapping
  }
  return "";
}

absl::StatusOr<NpyArray> parse_npy(std::string_view file, const NpyReadOptions& options) {
  if (file.size() < kMagic.size() || file.substr(0, kMagic.size()) != kMagic) {
    return invalid("not a .npy file: bad magic (expected \\x93NUMPY)");
  }
  if (file.size() < 8) return invalid("truncated header: the file ends inside the version bytes");
  const int major = static_cast<unsigned char>(file[6]);
  const int minor = static_cast<unsigned char>(file[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return invalid(absl::StrCat("unsupported format version ", major, ".", minor,
                                " (supported: 1.0, 2.0, 3.0)"));
  }
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t preamble = 8 + len_bytes;
  if (file.size() < preamble) {
    return invalid(absl::StrCat("truncated header: the file has ", file.size(),
                                " bytes, the version ", major, ".0 preamble needs ", preamble));
  }
  const std::uint64_t header_len = load_le(file, 8, static_cast<int>(len_bytes));
  if (preamble + header_len > file.size()) {
    return invalid(absl::StrCat("header length ", header_len, " runs past the end of the file (",
                                file.size() - preamble, " bytes after the preamble)"));
  }
  const std::string_view header = file.substr(preamble, header_len);

  std::optional<HeaderValue> descr, fortran, shape;
  if (absl::Status s = HeaderParser(header).parse(descr, fortran, shape); !s.ok()) return s;
  if (!descr) return invalid("header has no 'descr'");
  if (!fortran) return invalid("header has no 'fortran_order'");
  if (!shape) return invalid("header has no 'shape'");
  if (descr->kind != HeaderValue::Kind::kString) return invalid("'descr' is not a string");
  if (fortran->kind != HeaderValue::Kind::kBool) {
    return invalid("'fortran_order' is not True or False");
  }
  if (shape->kind != HeaderValue::Kind::kTuple) return invalid("'shape' is not a tuple");

  absl::StatusOr<DType> dtype = DTypeFromDescr(descr->text, options.bf16);
  if (!dtype.ok()) return dtype.status();

  const std::vector<std::int64_t>& dims = shape->ints;
  if (dims.empty()) return invalid("0-D array (a scalar) is not a matrix; need 1-D or 2-D");
  if (dims.size() > 2) {
    return invalid(absl::StrCat(dims.size(), "-D shape ", shape_string(dims),
                                " is not supported: only 1-D and 2-D arrays"));
  }
  NpyArray out;
  out.rows = dims.size() == 1 ? 1 : dims[0];
  out.cols = dims.size() == 1 ? dims[0] : dims[1];
  out.dtype = *dtype;
  out.layout = (dims.size() == 2 && fortran->flag) ? Layout::kColMajor : Layout::kRowMajor;

  const auto esize = static_cast<std::int64_t>(kernels::dtype_size(out.dtype));
  const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / esize;
  if (out.cols != 0 && out.rows > limit / out.cols) {
    return invalid(absl::StrCat("shape ", shape_string(dims), " is too large"));
  }
  const std::uint64_t expected = static_cast<std::uint64_t>(out.rows * out.cols * esize);
  const std::uint64_t available = file.size() - preamble - header_len;
  if (available < expected) {
    return invalid(absl::StrCat("truncated data: shape ", shape_string(dims), " of ",
                                quote(descr->text), " needs ", expected, " bytes, the file has ",
                                available));
  }
  if (available > expected) {
    return invalid(absl::StrCat(available - expected, " unexpected bytes after the data (shape ",
                                shape_string(dims), " of ", quote(descr->text), " needs ", expected,
                                " bytes); is the header length wrong?"));
  }
  out.bytes = std::string(file.substr(preamble + header_len));
  return out;
}

absl::StatusOr<NpyArray> read_npy(const std::string& path, const NpyReadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errno_status("cannot open", path, errno);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return errno_status("cannot read", path, errno);
  absl::StatusOr<NpyArray> array = parse_npy(buffer.view(), options);
  if (!array.ok()) {
    return absl::Status(array.status().code(),
                        absl::StrCat(path, ": ", std::string(array.status().message())));
  }
  return array;
}

absl::StatusOr<std::string> serialize_npy(const NpyArray& array) {
  if (npy_descr(array.dtype).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy: no descr for dtype ", std::string(kernels::dtype_name(array.dtype))));
  }
  const auto esize = static_cast<std::int64_t>(kernels::dtype_size(array.dtype));
  if (array.rows < 0 || array.cols < 0 ||
      static_cast<std::int64_t>(array.bytes.size()) != array.rows * array.cols * esize) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy: ", array.bytes.size(), " data bytes do not match shape (", array.rows,
                     ", ", array.cols, ") of ", std::string(npy_descr(array.dtype))));
  }
  std::string header =
      absl::StrCat("{'descr': '", std::string(npy_descr(array.dtype)),
                   "', 'fortran_order': ", array.layout == Layout::kColMajor ? "True" : "False",
                   ", 'shape': (", array.rows, ", ", array.cols, "), }");
  // NumPy pads with spaces and a final newline so that the data starts 64-byte aligned.
  const std::size_t unpadded = kMagic.size() + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out;
  out.reserve(kMagic.size() + 4 + header.size() + array.bytes.size());
  out.append(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xff));
  out.append(header);
  out.append(array.bytes);
  return out;
}

absl::Status write_npy(const std::string& path, const NpyArray& array) {
  absl::StatusOr<std::string> file = serialize_npy(array);
  if (!file.ok()) return file.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return errno_status("cannot create", path, errno);
  out.write(file->data(), static_cast<std::streamsize>(file->size()));
  out.close();
  if (!out) return errno_status("cannot write", path, errno);
  return absl::OkStatus();
}

}  // namespace matserve::client
